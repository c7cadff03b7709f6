# Written by hand on 2026-11-28: the change log that lets an API list page kept by a portal process be answered
# again while nothing it shows has changed (tenants/api/kept_pages.py says how it is read).
#
# A row (scope, xid) says: transaction ``xid`` wrote something a page of ``scope`` shows. Scopes are a team's id
# (its tenants, its requests and those offered to it, its audit events, its memberships), minus a user's id (their
# memberships, the audit events they acted in) and 0 (a team, tier, cluster or user name any row may show, or a
# table emptied). The rows are written by triggers in the writer's own transaction, so a row is visible exactly when
# the change it stands for is. One row per scope and transaction: a second write of the same scope adds nothing.

from django.db import migrations

SCOPES = {
    # table: SQL of the scopes a row touches, as a bigint[] of NEW/OLD columns (NULLs are skipped)
    "tenants_tenant": "ARRAY[{r}.team_id]::bigint[]",
    "tenants_tenantrequest": "ARRAY[{r}.team_id, {r}.target_team_id]::bigint[]",
    "tenants_auditevent": "ARRAY[{r}.team_id, -{r}.actor_id]::bigint[]",
    "tenants_membership": "ARRAY[{r}.team_id, -{r}.user_id]::bigint[]",
}
# Rows every list may show through a foreign key: any change is a change of scope 0. For users, only the name a row
# shows (a sign-in writes the user's row and changes nothing a list shows).
SHOWN = {
    "tenants_team": "",
    "tenants_tier": "",
    "tenants_cluster": "",
    "tenants_user": "WHEN (OLD.username IS DISTINCT FROM NEW.username)",
}

FORWARD = [
    """
    CREATE TABLE berth_page_change (
        scope bigint NOT NULL,
        xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
        at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (scope, xid)
    )
    """,
    """
    CREATE FUNCTION berth_page_changed(scopes bigint[]) RETURNS void LANGUAGE sql AS $$
        INSERT INTO berth_page_change (scope)
        SELECT DISTINCT s FROM unnest(scopes) AS s WHERE s IS NOT NULL
        ON CONFLICT DO NOTHING
    $$
    """,
]

for table, scopes in SCOPES.items():
    old, new = scopes.format(r="OLD"), scopes.format(r="NEW")
    FORWARD += [
        f"""
        CREATE FUNCTION {table}_page_changed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'INSERT' THEN
                PERFORM berth_page_changed({new});
            ELSIF TG_OP = 'UPDATE' THEN
                PERFORM berth_page_changed({old} || {new});
            ELSE
                PERFORM berth_page_changed({old});
            END IF;
            RETURN NULL;
        END
        $$
        """,
        f"""
        CREATE TRIGGER berth_page_changed AFTER INSERT OR UPDATE OR DELETE ON {table}
        FOR EACH ROW EXECUTE FUNCTION {table}_page_changed()
        """,
    ]

FORWARD.append(
    """
    CREATE FUNCTION berth_shown_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM berth_page_changed(ARRAY[0::bigint]);
        RETURN NULL;
    END
    $$
    """
)
for table, when in SHOWN.items():
    FORWARD.append(
        f"""
        CREATE TRIGGER berth_shown_changed AFTER UPDATE ON {table}
        FOR EACH ROW {when} EXECUTE FUNCTION berth_shown_changed()
        """
    )
    FORWARD.append(
        f"""
        CREATE TRIGGER berth_shown_deleted AFTER DELETE ON {table}
        FOR EACH ROW EXECUTE FUNCTION berth_shown_changed()
        """
    )
for table in [*SCOPES, *SHOWN]:
    FORWARD.append(
        f"""
        CREATE TRIGGER berth_emptied AFTER TRUNCATE ON {table}
        FOR EACH STATEMENT EXECUTE FUNCTION berth_shown_changed()
        """
    )
REVERSE = [
    *(f"DROP TRIGGER berth_emptied ON {table}" for table in [*SCOPES, *SHOWN]),
    *(f"DROP TRIGGER berth_shown_changed ON {table}" for table in SHOWN),
    *(f"DROP TRIGGER berth_shown_deleted ON {table}" for table in SHOWN),
    "DROP FUNCTION berth_shown_changed()",
    *(f"DROP TRIGGER berth_page_changed ON {table}" for table in SCOPES),
    *(f"DROP FUNCTION {table}_page_changed()" for table in SCOPES),
    "DROP FUNCTION berth_page_changed(bigint[])",
    "DROP TABLE berth_page_change",
]


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0017_request_team_target_index"),
    ]

    operations = [migrations.RunSQL(FORWARD, REVERSE)]
