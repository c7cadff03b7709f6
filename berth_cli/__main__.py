from berth_cli.main import main

main()
