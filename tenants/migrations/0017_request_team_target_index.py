# Written by hand on 2026-11-23, concurrent and in this order as 0015: the receiving team joins the team in an index
# built without blocking writes, and the team's own index (which the new one covers) goes only once it is there.

import django.db.models.deletion
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

# The name Django gave the foreign key's index when the model was still "Request" (0001; 0004 renamed the table,
# not its indexes); the same on every database.
TEAM_INDEX = "tenants_request_team_id_aea278c9"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("tenants", "0016_list_order_tie_break"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="tenantrequest",
            index=models.Index(fields=["team", "target_team"], name="request_team_target"),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="tenantrequest",
                    name="team",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="requests",
                        to="tenants.team",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX CONCURRENTLY IF EXISTS "{TEAM_INDEX}"',
                    reverse_sql=f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{TEAM_INDEX}" '
                    'ON "tenants_tenantrequest" ("team_id")',
                ),
            ],
        ),
    ]
