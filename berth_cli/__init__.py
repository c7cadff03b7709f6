"""`berth`: the command-line client of Berth's REST API (tenants, requests, kubeconfigs, audit, tenants as code).

It talks only to the portal's REST API (``/api/v1/``) and, to sign in, to the OIDC provider; it never
imports the portal's code, so it installs and runs anywhere ``pip install`` works.
"""

from importlib import metadata

try:
    __version__ = metadata.version("berth")
except metadata.PackageNotFoundError:  # run from a source checkout (python -m berth_cli)
    __version__ = "0.1.0+source"
