# The API no longer keeps list pages (issue 34): drop 0018's change log, its triggers and its functions. Going back
# makes them again, exactly as 0018 made them.

import importlib

from django.db import migrations

page_changes = importlib.import_module("tenants.migrations.0018_page_changes")


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0020_tier_egress_allow"),
    ]

    operations = [migrations.RunSQL(page_changes.REVERSE, page_changes.FORWARD)]
