"""The `berth` command: Click commands that each call the REST API and print the answer."""

from __future__ import annotations

import datetime as dt
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from berth_cli import __version__, oidc, tenantsfile, wait
from berth_cli import config as configuration
from berth_cli import kubeconfig as kubeconfigs
from berth_cli import plan as plans
from berth_cli.client import Api, Credential, api_from, is_uuid, object_path, tls_verify
from berth_cli.errors import CliError, Exit
from berth_cli.output import Column, date_of, dump, field, moment_of, output_option, printable, show, table

TENANT_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("TEAM", field("team")),
    ("CLUSTER", field("cluster")),
    ("KIND", field("kind")),
    ("TIER", field("tier")),
    ("STATUS", field("status")),
    ("EXPIRES", date_of("expires_at")),
    ("NAMESPACE", field("namespace")),
]
REQUEST_COLUMNS: list[Column] = [
    ("ID", field("id")),
    ("ACTION", field("action")),
    ("TEAM", field("team")),
    ("CLUSTER", field("cluster")),
    ("NAME", field("name")),
    ("TIER", field("tier")),
    ("STATUS", field("status")),
    ("BY", field("requested_by")),
    ("CREATED", moment_of("created_at")),
    ("PURPOSE", field("purpose")),
]
AUDIT_COLUMNS: list[Column] = [
    ("AT", moment_of("at")),
    ("ACTOR", field("actor_name")),
    ("TEAM", field("team")),
    ("ACTION", field("action")),
    ("OBJECT", lambda e: f"{e.get('object_type')} {e.get('object_id')}"),
]
_DURATION = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_REQUEST_PREFIX = re.compile(r"[0-9a-f-]{6,36}")


class BerthGroup(click.Group):
    """Turns a CliError anywhere below into a message on stderr and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CliError as error:
            click.echo(f"berth: {printable(error.message)}", err=True)
            for line in error.details:
                click.echo(f"  {printable(line)}", err=True)
            ctx.exit(int(error.code))


class Session:
    """The command's context: the config file and, on first use, the API with the caller's credential."""

    def __init__(self, config_path: Path | None, url: str | None) -> None:
        self.config = configuration.load(config_path)
        self.url = url
        self._api: Api | None = None

    @property
    def api(self) -> Api:
        if self._api is None:
            self._api = api_from(self.config, self.url)
        return self._api


pass_session = click.make_pass_decorator(Session)


@click.group(cls=BerthGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="berth")
@click.option("--url", envvar="BERTH_URL", help="The portal, e.g. https://berth.example.com [env BERTH_URL].")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="BERTH_CONFIG",
    help="Config file [env BERTH_CONFIG; default ~/.config/berth/config.yaml].",
)
@click.pass_context
def cli(ctx: click.Context, url: str | None, config_path: Path | None) -> None:
    """Berth from the command line: tenants, requests, kubeconfigs, the audit trail, and tenants as code.

    Credentials: BERTH_TOKEN (a portal API token), or `berth login` (a token, or OIDC sign-in in the browser).

    \b
    Exit codes:
      0 ok                    5 not found (or not yours)
      1 error (network, 5xx)  6 invalid input (API field errors, tenants file)
      2 usage                 7 conflict (no longer possible)
      3 not signed in         8 --wait: failed, rejected or cancelled
      4 forbidden             9 --wait: timed out
                             10 berth diff: there are changes
    """
    ctx.obj = Session(config_path, url)


# --- Signing in --------------------------------------------------------------------------------------------


@cli.command()
@click.option("--token-stdin", is_flag=True, help="Read a portal API token from stdin and keep it in the config.")
@click.option("--oidc", "use_oidc", is_flag=True, help="Sign in through the OIDC provider in a browser (PKCE).")
@click.option("--issuer", help="OIDC issuer URL (kept in the config).")
@click.option("--client-id", help=f"OIDC client id [default {configuration.DEFAULT_CLIENT_ID}].")
@click.option(
    "--oidc-ca-file",
    type=click.Path(exists=True, dir_okay=False, resolve_path=True),
    help="CA bundle for the provider.",
)
@click.option("--resource", help="Resource indicator for the API's access token (e.g. urn:berth:api).")
@click.option(
    "--ca-file", type=click.Path(exists=True, dir_okay=False, resolve_path=True), help="CA bundle for the portal's TLS."
)
@click.option("--no-browser", is_flag=True, help="Print the sign-in URL instead of opening a browser.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="Loopback port for the callback (0: any).")
@click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds to wait for the sign-in.")
@pass_session
def login(
    session: Session,
    token_stdin: bool,
    use_oidc: bool,
    issuer: str | None,
    client_id: str | None,
    oidc_ca_file: str | None,
    resource: str | None,
    ca_file: str | None,
    no_browser: bool,
    port: int,
    timeout: float,
) -> None:
    """Keep the portal URL and your credentials in the config file (mode 0600)."""
    config = session.config
    config.url = session.url or config.url
    config.ca_file = ca_file or config.ca_file
    if token_stdin and use_oidc:
        raise CliError("choose one: --token-stdin or --oidc", Exit.USAGE)
    if not token_stdin and not use_oidc and config.oidc is None:
        raise CliError("say how to sign in: --token-stdin or --oidc --issuer URL", Exit.USAGE)
    if token_stdin:
        config.token = sys.stdin.readline().strip()
        config.oidc = None
        if not config.token:
            raise CliError("no token on stdin", Exit.USAGE)
    else:
        settings = config.oidc or configuration.OidcSettings(issuer="")
        settings.issuer = (issuer or settings.issuer).rstrip("/")
        if not settings.issuer:
            raise CliError("--issuer is needed for the first OIDC sign-in", Exit.USAGE)
        settings.client_id = client_id or settings.client_id
        settings.ca_file = oidc_ca_file or settings.ca_file
        settings.resource = resource if resource is not None else settings.resource
        config.oidc = oidc.login(settings, open_browser=not no_browser, port=port, timeout=timeout)
        config.token = ""
    # Only credentials the portal accepts are kept.
    me = Api(config.url, Credential(config=config, token=config.token), verify=tls_verify(config)).get("/api/v1/me/")
    configuration.save(config)
    click.echo(f"Signed in to {config.url} as {printable(me.get('username'))}.", err=True)


@cli.command()
@pass_session
def logout(session: Session) -> None:
    """Forget the stored token or OIDC sign-in, revoking the refresh token (the portal URL and issuer stay)."""
    config = session.config
    config.token = ""
    if config.oidc is not None:
        if not oidc.revoke(config.oidc):
            click.echo("berth: the provider did not confirm revoking the refresh token", err=True)
        config.oidc.access_token = config.oidc.refresh_token = ""
        config.oidc.expires_at = 0.0
    configuration.save(config)
    click.echo("Signed out.", err=True)


@cli.command()
@output_option
@pass_session
def whoami(session: Session, fmt: str) -> None:
    """Who the credentials belong to: teams, roles and platform roles."""
    me = session.api.get("/api/v1/me/")
    if fmt != "table":
        dump(me, fmt)
        return
    teams = ", ".join(f"{m['team']} ({m['role']})" for m in me.get("teams") or []) or "none"
    table(
        [{**me, "teams": teams, "platform_roles": ", ".join(me.get("platform_roles") or []) or "none"}],
        [("USER", field("username")), ("TEAMS", field("teams")), ("PLATFORM ROLES", field("platform_roles"))],
    )


# --- Reading ---------------------------------------------------------------------------------------------


@cli.command()
@click.option("--team", help="Only this team's tenants.")
@click.option("--status", multiple=True, help="Only tenants in this status (repeatable).")
@click.option("--cluster", help="Only tenants on this cluster.")
@output_option
@pass_session
def tenants(session: Session, team: str | None, status: tuple[str, ...], cluster: str | None, fmt: str) -> None:
    """The tenants you can see."""
    rows = session.api.all("/api/v1/tenants/", team=team, status=list(status) or None, cluster=cluster)
    show(rows, fmt, TENANT_COLUMNS, empty="No tenants.")


@cli.command()
@click.option("--team", help="Only this team's requests.")
@click.option("--status", type=click.Choice(["pending", "approved", "rejected", "cancelled"]))
@click.option("--action", type=click.Choice(["create", "change_tier", "extend", "delete"]))
@output_option
@pass_session
def requests(session: Session, team: str | None, status: str | None, action: str | None, fmt: str) -> None:
    """Requests you can see (approvers: every team's)."""
    rows = session.api.all("/api/v1/requests/", team=team, status=status, action=action)
    show(rows, fmt, REQUEST_COLUMNS, empty="No requests.")


def parse_since(text: str, now: dt.datetime | None = None) -> str:
    """``30m``, ``2h``, ``7d``, ``1w`` ago, or an ISO date or date-time; as the ISO date-time the API filters on."""
    now = now or dt.datetime.now(dt.UTC)
    match = _DURATION.fullmatch(text.strip())
    if match:
        moment = now - dt.timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    else:
        try:
            moment = dt.datetime.fromisoformat(text.strip())
        except ValueError:
            raise CliError(f"--since {text!r}: use 30m, 2h, 7d, 1w or an ISO date/time", Exit.USAGE) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


@cli.command()
@click.option("--since", default="24h", show_default=True, help="How far back: 30m, 2h, 7d, 1w, or an ISO date/time.")
@click.option("--until", "until_", help="Up to this ISO date/time.")
@click.option("--team", help="Only this team's events.")
@click.option("--actor", help="Only this person's events.")
@click.option("--action", help="Actions starting with this, e.g. tenant. or request.approve.")
@click.option("--limit", type=click.IntRange(1, 100000), default=1000, show_default=True)
@output_option
@pass_session
def audit(
    session: Session,
    since: str,
    until_: str | None,
    team: str | None,
    actor: str | None,
    action: str | None,
    limit: int,
    fmt: str,
) -> None:
    """The audit trail you may read, newest first."""
    rows = session.api.all(
        "/api/v1/audit-events/",
        limit=limit,
        since=parse_since(since),
        until=parse_since(until_) if until_ else None,
        team=team,
        actor=actor,
        action=action,
    )
    show(rows, fmt, AUDIT_COLUMNS, empty="No audit events in that window.")


# --- Showback ------------------------------------------------------------------------------------------

COST_COLUMNS: list[Column] = [
    ("TENANT", field("tenant_name")),
    ("CLUSTER", field("cluster")),
    ("TEAM", field("team")),
    ("LIVE H", field("live_hours")),
    ("ASLEEP H", field("asleep_hours")),
    ("ALLOCATION", lambda line: f"{line['currency']} {line['allocation']['total']}"),
    ("USAGE", lambda line: f"{line['currency']} {line['usage']['total']}"),
]


@cli.command()
@click.option("--team", help="A team's costs: every tenant it held during the month.")
@click.option("--tenant", "tenant_ref", help="One tenant's costs (id, name or cluster/name).")
@click.option("--month", help="The UTC month, YYYY-MM [default: this month so far].")
@output_option
@pass_session
def costs(session: Session, team: str | None, tenant_ref: str | None, month: str | None, fmt: str) -> None:
    """Showback: what a team's or a tenant's tenants cost in a month, allocation- and usage-based."""
    if (team is None) == (tenant_ref is None):
        raise CliError("give --team or --tenant", Exit.USAGE)
    if tenant_ref is not None:
        tenant = find_tenant(session.api, tenant_ref, live_only=False)
        report = session.api.get(object_path("tenants", tenant["id"], "costs"), month=month)
    else:
        report = session.api.get(f"/api/v1/teams/{quote(team or '', safe='')}/costs/", month=month)
    if fmt != "table":
        dump(report, fmt)
        return
    if not report["lines"]:
        click.echo(f"No costs in {report['month']}.", err=True)
        return
    totals = [
        {"tenant_name": "TOTAL", "currency": t["currency"], "allocation": t["allocation"], "usage": t["usage"]}
        for t in report["totals"]
    ]
    table([*report["lines"], *totals], COST_COLUMNS)


# --- Requests ------------------------------------------------------------------------------------------


def find_tenant(api: Api, ref: str, *, team: str | None = None, live_only: bool = True) -> dict[str, Any]:
    """A tenant by id, by name, or by ``cluster/name``; USAGE when the name is ambiguous."""
    if is_uuid(ref):
        tenant: dict[str, Any] = api.get(object_path("tenants", ref))
        return tenant
    cluster, _, name = ref.rpartition("/")
    candidates = [
        t
        for t in api.each("/api/v1/tenants/", team=team, cluster=cluster or None)
        if t["name"] == name and (not live_only or t["status"] in plans.LIVE)
    ]
    if not candidates:
        raise CliError(f"no tenant {ref!r} that you can see", Exit.NOT_FOUND)
    if len(candidates) > 1:
        where = ", ".join(f"{t['team']} on {t['cluster']}" for t in candidates)
        raise CliError(f"{ref!r} is ambiguous ({where}): say CLUSTER/NAME or --team", Exit.USAGE)
    return candidates[0]


def find_request(api: Api, ref: str, *, status: str | None = "pending") -> str:
    """A request id from the full id or a unique prefix of it (among ``status`` requests)."""
    if is_uuid(ref):
        return ref
    ref = ref.lower()
    if not _REQUEST_PREFIX.fullmatch(ref):
        raise CliError(f"{ref!r} is not a request id (or at least 6 of its first characters)", Exit.USAGE)
    matches: list[str] = [r["id"] for r in api.each("/api/v1/requests/", status=status) if r["id"].startswith(ref)]
    if not matches:
        raise CliError(f"no {status or ''} request starting with {ref!r}".replace("  ", " "), Exit.NOT_FOUND)
    if len(matches) > 1:
        raise CliError(f"{ref!r} matches {len(matches)} requests; give more of the id", Exit.USAGE)
    return matches[0]


def show_request(request: dict[str, Any], fmt: str) -> None:
    if fmt == "table":
        table([request], REQUEST_COLUMNS)
    else:
        dump(request, fmt)


@cli.group(cls=BerthGroup)
def request() -> None:
    """Create, approve, reject or cancel a request; accept or decline a transfer offered to your team."""


_ACTIONS = {"create": "create", "change-tier": "change_tier", "extend": "extend", "delete": "delete"}


@request.command("create")
@click.option("--action", type=click.Choice(list(_ACTIONS)), default="create", show_default=True)
@click.option("--team", help="create: the team the tenant is for.")
@click.option("--name", help="create: the tenant's name (a DNS label).")
@click.option("--cluster", help="create: the cluster.")
@click.option("--tier", help="create, change-tier: the tier.")
@click.option("--kind", default="namespace", show_default=True, help="create: namespace, vcluster, …")
@click.option("--tenant", "tenant_ref", help="change-tier, extend, delete: the tenant (NAME, CLUSTER/NAME or id).")
@click.option("--expires", type=click.DateTime(["%Y-%m-%d"]), help="create, extend: expiry date (YYYY-MM-DD).")
@click.option("--purpose", default="", help="Why (shown to approvers).")
@click.option("--idempotency-key", default="", help="Re-running with the same key returns the first request.")
@click.option("--wait", "wait_", is_flag=True, help="Wait until it is carried out, showing progress on stderr.")
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds --wait waits at most.")
@output_option
@pass_session
def request_create(
    session: Session,
    action: str,
    team: str | None,
    name: str | None,
    cluster: str | None,
    tier: str | None,
    kind: str,
    tenant_ref: str | None,
    expires: dt.datetime | None,
    purpose: str,
    idempotency_key: str,
    wait_: bool,
    timeout: float,
    fmt: str,
) -> None:
    """Ask for a tenant, or for a change to one (approvals and budgets apply)."""
    api = session.api
    body: dict[str, Any] = {"action": _ACTIONS[action], "purpose": purpose}
    if action == "create":
        body.update({"team": team, "name": name, "cluster": cluster, "tier": tier, "kind": kind})
    else:
        if not tenant_ref:
            raise CliError(f"--action {action} needs --tenant", Exit.USAGE)
        body["tenant"] = find_tenant(api, tenant_ref, team=team)["id"]
        if tier:
            body["tier"] = tier
    if expires is not None:
        body["requested_expiry"] = expires.date().isoformat()
    created = api.post(
        "/api/v1/requests/", {k: v for k, v in body.items() if v is not None}, idempotency_key=idempotency_key
    )
    if not wait_:
        show_request(created, fmt)
        return
    if fmt == "table":
        show_request(created, fmt)
    done = wait.until_done(api, created["id"], timeout=timeout, label=f"{created['action']} {created['name']}")
    final = api.get(object_path("requests", created["id"]))
    if fmt != "table":
        dump({"request": final, "tenant": done if "namespace" in done else None}, fmt)
    elif "namespace" in done:
        table([done], TENANT_COLUMNS)


def _act_on_request(session: Session, request_id: str, verb: str, body: dict[str, Any] | None, fmt: str) -> None:
    """POST /requests/{id}/{verb}/ for a request named by its id or a unique prefix; show the answer."""
    path = object_path("requests", find_request(session.api, request_id), verb)
    show_request(session.api.post(path, body), fmt)


@request.command("approve")
@click.argument("request_id")
@click.option("--comment", default="", help="Shown to the requester.")
@output_option
@pass_session
def request_approve(session: Session, request_id: str, comment: str, fmt: str) -> None:
    """Approve a pending request (approvers and platform admins; never your own)."""
    _act_on_request(session, request_id, "approve", {"comment": comment}, fmt)


@request.command("reject")
@click.argument("request_id")
@click.option("--reason", required=True, help="Why (shown to the requester).")
@output_option
@pass_session
def request_reject(session: Session, request_id: str, reason: str, fmt: str) -> None:
    """Reject a pending request, saying why."""
    _act_on_request(session, request_id, "reject", {"reason": reason}, fmt)


@request.command("cancel")
@click.argument("request_id")
@output_option
@pass_session
def request_cancel(session: Session, request_id: str, fmt: str) -> None:
    """Cancel a pending request (its requester, or a team owner)."""
    _act_on_request(session, request_id, "cancel", None, fmt)


@request.command("accept")
@click.argument("request_id")
@output_option
@pass_session
def request_accept(session: Session, request_id: str, fmt: str) -> None:
    """Accept a transfer offered to your team (its owners); an approver may still have to approve it."""
    _act_on_request(session, request_id, "accept", None, fmt)


@request.command("decline")
@click.argument("request_id")
@click.option("--reason", default="", help="Why (shown to the team that offered it).")
@output_option
@pass_session
def request_decline(session: Session, request_id: str, reason: str, fmt: str) -> None:
    """Decline a transfer offered to your team (its owners)."""
    _act_on_request(session, request_id, "decline", {"reason": reason}, fmt)


@cli.command("transfer")
@click.argument("tenant_ref", metavar="TENANT")
@click.option("--to", "target_team", required=True, help="The team to offer the tenant to (its slug).")
@click.option("--team", help="The tenant's team, when its name is not unique.")
@click.option("--purpose", default="", help="Why (shown to the receiving team and approvers).")
@output_option
@pass_session
def transfer(session: Session, tenant_ref: str, target_team: str, team: str | None, purpose: str, fmt: str) -> None:
    """Offer TENANT to another team (team owners and platform admins); an owner of that team accepts with
    `berth request accept`. Its credentials are renewed on the move: kubeconfigs issued before stop working."""
    tenant = find_tenant(session.api, tenant_ref, team=team)
    path = object_path("tenants", tenant["id"], "transfer")
    show_request(session.api.post(path, {"target_team": target_team, "purpose": purpose}), fmt)


# --- Kubeconfig -------------------------------------------------------------------------------------------


@cli.command("kubeconfig")
@click.argument("tenant_ref", metavar="TENANT")
@click.option("--team", help="The tenant's team, when its name is not unique.")
@click.option("--lifetime", type=int, help="Credential lifetime in seconds (600 up to the tier's maximum).")
@click.option(
    "--merge-into",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Merge into this kubeconfig (e.g. ~/.kube/config) instead of printing it.",
)
@click.option("--set-current", is_flag=True, help="With --merge-into: make the tenant's context the current one.")
@pass_session
def kubeconfig(
    session: Session,
    tenant_ref: str,
    team: str | None,
    lifetime: int | None,
    merge_into: Path | None,
    set_current: bool,
) -> None:
    """A fresh short-lived kubeconfig for TENANT (NAME, CLUSTER/NAME or id); every issue is audited."""
    tenant = find_tenant(session.api, tenant_ref, team=team)
    body = {} if lifetime is None else {"lifetime_seconds": lifetime}
    response = session.api.call("POST", object_path("tenants", tenant["id"], "kubeconfig"), json=body)
    if merge_into is None:
        click.echo(response.text, nl=False)
        return
    context = kubeconfigs.merge_into(merge_into.expanduser(), response.text, set_current=set_current)
    click.echo(f"Context {printable(context)} merged into {merge_into}.", err=True)


# --- Right-sizing -----------------------------------------------------------------------------------------

RIGHTSIZING_COLUMNS: list[Column] = [
    ("RESOURCE", field("resource")),
    ("AVERAGE", lambda e: _share(e.get("average_share"))),
    ("PEAK", lambda e: _share(e.get("peak_share"))),
    ("DAYS NEAR LIMIT", field("near_limit_days")),
]
_FINGERPRINT_PREFIX = re.compile(r"[0-9a-f]{8,64}")


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


@cli.command("rightsizing")
@click.argument("tenant_ref", metavar="TENANT")
@click.option("--team", help="The tenant's team, when its name is not unique.")
@click.option("--accept", "accept", metavar="FINGERPRINT", help="Accept the suggestion shown (its fingerprint).")
@click.option("--dismiss", "dismiss", metavar="FINGERPRINT", help="Dismiss the suggestion shown (its fingerprint).")
@click.option("--idempotency-key", default="", help="--accept: re-running with the same key returns the first request.")
@output_option
@pass_session
def rightsizing(
    session: Session,
    tenant_ref: str,
    team: str | None,
    accept: str | None,
    dismiss: str | None,
    idempotency_key: str,
    fmt: str,
) -> None:
    """TENANT's tier suggestion with its evidence; --accept files it as a change-tier request (team owners).

    FINGERPRINT is the one printed with the suggestion (at least its first 8 characters): a suggestion that
    changed since (new history, another tier) is refused (exit 7), never filed unseen.
    """
    if accept and dismiss:
        raise CliError("give --accept or --dismiss, not both", Exit.USAGE)
    tenant = find_tenant(session.api, tenant_ref, team=team)
    path = object_path("tenants", tenant["id"], "rightsizing")
    found: dict[str, Any] = session.api.get(path)
    chosen = accept or dismiss
    if chosen is None:
        _show_rightsizing(found, fmt)
        return
    if not _FINGERPRINT_PREFIX.fullmatch(chosen):
        raise CliError("a fingerprint is 8 to 64 lower-case hex digits", Exit.USAGE)
    current = (found.get("suggestion") or {}).get("fingerprint", "")
    if current.startswith(chosen):
        fingerprint = current
    elif len(chosen) == 64:
        fingerprint = chosen  # the portal judges it: 409 when it is not the current suggestion's
    else:
        raise CliError(
            "this suggestion is out of date: the tenant's tier or usage history changed since it was shown; "
            "run `berth rightsizing` again",
            Exit.CONFLICT,
        )
    if accept:
        made = session.api.post(path + "accept/", {"fingerprint": fingerprint}, idempotency_key=idempotency_key)
        show_request(made, fmt)
    else:
        _show_rightsizing(session.api.post(path + "dismiss/", {"fingerprint": fingerprint}), fmt)


def _show_rightsizing(found: dict[str, Any], fmt: str) -> None:
    if fmt != "table":
        dump(found, fmt)
        return
    suggestion = found.get("suggestion")
    covered = _share(found.get("coverage"))
    click.echo(
        f"Tier {printable(found.get('tier'))}, {found.get('window_start')} to {found.get('window_end')}, "
        f"{covered} covered. CPU and memory judged on {printable(found.get('basis_label') or 'quota requests')} "
        f"({_share(found.get('measured_coverage') or 0)} measured)."
    )
    if found.get("evidence"):
        table(found["evidence"], RIGHTSIZING_COLUMNS)
    if suggestion:
        click.echo(
            f"Suggested: {printable(suggestion['tier'])} ({suggestion['direction']}). {printable(suggestion['reason'])}"
        )
        click.echo(f"Fingerprint: {suggestion['fingerprint']}")
    else:
        click.echo(" ".join(printable(note) for note in found.get("notes", [])) or "No change suggested.")


# --- Sleep ---------------------------------------------------------------------------------------------------

SLEEP_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("TEAM", field("team")),
    ("CLUSTER", field("cluster")),
    ("SLEEP", field("sleep_state")),
    ("REASON", field("sleep_reason")),
    ("SINCE", moment_of("asleep_since")),
]


def _sleep_action(session: Session, tenant_ref: str, team: str | None, verb: str, fmt: str) -> None:
    tenant = find_tenant(session.api, tenant_ref, team=team)
    answer = session.api.post(object_path("tenants", tenant["id"], verb))
    if fmt == "table":
        table([answer], SLEEP_COLUMNS)
    else:
        dump(answer, fmt)


@cli.command("sleep")
@click.argument("tenant_ref", metavar="TENANT")
@click.option("--team", help="The tenant's team, when its name is not unique.")
@output_option
@pass_session
def sleep(session: Session, tenant_ref: str, team: str | None, fmt: str) -> None:
    """Put TENANT to sleep: its Deployments and StatefulSets scale to zero, its CronJobs are suspended (team
    owners and platform admins, where the tier allows it)."""
    _sleep_action(session, tenant_ref, team, "sleep", fmt)


@cli.command("wake")
@click.argument("tenant_ref", metavar="TENANT")
@click.option("--team", help="The tenant's team, when its name is not unique.")
@output_option
@pass_session
def wake(session: Session, tenant_ref: str, team: str | None, fmt: str) -> None:
    """Wake TENANT: every workload gets back what it had before it slept."""
    _sleep_action(session, tenant_ref, team, "wake", fmt)


# --- Webhooks ----------------------------------------------------------------------------------------------

WEBHOOK_COLUMNS: list[Column] = [
    ("ID", field("id")),
    ("NAME", field("name")),
    ("FORMAT", field("format")),
    ("GOES TO", field("url_origin")),
    ("EVENTS", lambda row: ",".join(row.get("events") or [])),
    ("ACTIVE", lambda row: "yes" if row.get("is_active") else "no"),
    ("LAST DELIVERY", lambda row: row.get("last_delivery_status") or "-"),
]


def _team_webhooks(team: str, *rest: str) -> str:
    return "/".join(["/api/v1/teams", quote(team, safe=""), "webhooks", *(quote(r, safe="") for r in rest)]) + "/"


def _webhook_id(api: Api, team: str, name: str) -> int:
    """The id of the team's endpoint named exactly ``name``: a name of digits is a name too (an id is --id), so
    "2" never removes endpoint 2 when the owner meant the endpoint called "2"."""
    found = [row for row in api.all(_team_webhooks(team)) if row["name"] == name]
    if len(found) != 1:
        raise CliError(f"{team} has {'no' if not found else 'more than one'} webhook named {name!r}; give its --id")
    return int(found[0]["id"])


@cli.group(cls=BerthGroup)
def webhooks() -> None:
    """A team's webhook endpoints (docs/webhooks.md): members list them, owners create and delete them."""


@webhooks.command("list")
@click.option("--team", required=True, help="The team (its slug).")
@output_option
@pass_session
def webhooks_list(session: Session, team: str, fmt: str) -> None:
    """The team's endpoints: where they post (the URL's origin only), which events, how the last delivery went."""
    show(session.api.all(_team_webhooks(team)), fmt, WEBHOOK_COLUMNS, empty=f"{team} has no webhook endpoints.")


@webhooks.command("create")
@click.option("--team", required=True, help="The team (its slug).")
@click.option("--name", required=True, help="Say where it goes, e.g. #payments-alerts.")
@click.option("--url-stdin", is_flag=True, help="Read the URL from stdin (a Slack webhook's URL is a credential).")
@click.option("--url", help="https://… of the receiver; prefer --url-stdin, which keeps it out of shell history.")
@click.option("--event", "events", multiple=True, required=True, help="An event to send (repeatable).")
@click.option("--format", "format_", type=click.Choice(["json", "slack"]), default="json", show_default=True)
@output_option
@pass_session
def webhooks_create(
    session: Session,
    team: str,
    name: str,
    url_stdin: bool,
    url: str | None,
    events: tuple[str, ...],
    format_: str,
    fmt: str,
) -> None:
    """Register an endpoint for the team's events (owners); prints its signing secret, this once."""
    if url_stdin == (url is not None):
        raise CliError("give --url or --url-stdin", Exit.USAGE)
    target = sys.stdin.readline().strip() if url_stdin else (url or "")
    body = {"name": name, "url": target, "events": list(events), "format": format_}
    created = session.api.post(_team_webhooks(team), body)
    if fmt != "table":
        dump(created, fmt)
        return
    table([created], WEBHOOK_COLUMNS)
    click.echo(f"Signing secret (shown once; the receiver checks every delivery with it): {created['secret']}")


@webhooks.command("delete")
@click.argument("name", metavar="NAME", required=False)
@click.option("--id", "endpoint_id", type=click.IntRange(min=1), help="The endpoint's ID, instead of its NAME.")
@click.option("--team", required=True, help="The team (its slug).")
@pass_session
def webhooks_delete(session: Session, name: str | None, endpoint_id: int | None, team: str) -> None:
    """Remove the endpoint named NAME (or the one with --id) and its delivery log (owners)."""
    if (name is None) == (endpoint_id is None):
        raise CliError("give the endpoint's NAME or its --id", Exit.USAGE)
    if name is not None:
        endpoint_id = _webhook_id(session.api, team, name)
    session.api.call("DELETE", _team_webhooks(team, str(endpoint_id)))
    click.echo(f"Removed webhook {endpoint_id} of {team}.", err=True)


# --- Tenants as code --------------------------------------------------------------------------------------


def _file_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "-f",
        "--filename",
        "path",
        required=True,
        type=click.Path(dir_okay=False, allow_dash=True),
        help="The tenants file (format berth.dev/v1; - reads stdin).",
    )(function)


def _prune_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--prune", is_flag=True, help="Decommission the file's teams' tenants that the file does not list."
    )(function)


def load_plan(session: Session, path: str, prune: bool) -> plans.Plan:
    data = sys.stdin.buffer.read(tenantsfile.MAX_BYTES + 1) if path == "-" else _read(path)
    tenants_file = tenantsfile.parse(data, "<stdin>" if path == "-" else path)
    state = plans.fetch_state(session.api, tenants_file)
    return plans.make_plan(tenants_file, state, prune=prune)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(tenantsfile.MAX_BYTES + 1)
    except OSError as error:
        raise CliError(f"cannot read {path}: {error.strerror}", Exit.USAGE) from None


_SIGNS = {"create": "+", "change_tier": "~", "extend": "~", "delete": "-", "cancel": "-"}


def print_plan(plan: plans.Plan) -> None:
    def where(line: int | None) -> str:
        return f"  (line {line})" if line else ""

    for change in plan.changes:
        click.echo(
            f"{_SIGNS[change.action]} {change.action:<12} {printable(change.target):<40} {printable(change.detail)}"
            + where(change.line)
        )
    for note in plan.notes:
        target = printable(f"{note.team}/{note.cluster}/{note.name}")
        click.echo(f"= {note.status:<12} {target:<40} {printable(note.detail)}{where(note.line)}")
    counts = {kind: sum(1 for c in plan.changes if c.action == kind) for kind in _SIGNS}
    click.echo(
        f"Plan: {counts['create']} to create, {counts['change_tier'] + counts['extend']} to change, "
        f"{counts['delete'] + counts['cancel']} to remove, {len(plan.notes)} left as they are."
    )


@cli.command("diff")
@_file_option
@_prune_option
@output_option
@pass_session
def diff(session: Session, path: str, prune: bool, fmt: str) -> None:
    """Show what `berth apply` would change; exit 10 when there is something to change, 0 when none."""
    plan = load_plan(session, path, prune)
    if fmt == "table":
        print_plan(plan)
    else:
        dump(plan.as_dict(), fmt)
    if plan.changes:
        sys.exit(int(Exit.CHANGES))


@cli.command("apply")
@_file_option
@_prune_option
@click.option("--wait", "wait_", is_flag=True, help="Wait until every change is carried out (tenants ready).")
@click.option("--timeout", type=float, default=900.0, show_default=True, help="Seconds --wait waits at most.")
@output_option
@pass_session
def apply(session: Session, path: str, prune: bool, wait_: bool, timeout: float, fmt: str) -> None:
    """Make the file's teams match the file, through ordinary requests (approvals and budgets apply)."""
    plan = load_plan(session, path, prune)
    people = fmt == "table"
    if people:
        print_plan(plan)

    def report(outcome: plans.Outcome) -> None:
        if people:
            request = outcome.request or {}
            said = f"request {request.get('id')} {request.get('status')}" if request else outcome.result
            if outcome.error is not None:
                said = f"failed: {outcome.error.message} {'; '.join(outcome.error.details)}"
            elif outcome.result == "deferred":
                said = "deferred: waits for the decision on this tenant's open request; run apply again"
            click.echo(f"{outcome.change.action} {printable(outcome.change.target)}: {printable(said)}", err=True)

    outcomes = plans.apply(session.api, plan, report)
    waited = _wait_all(session.api, outcomes, timeout) if wait_ else {}
    if not people:
        dump({**plan.as_dict(), "outcomes": [o.as_dict() for o in outcomes], "waited": waited}, fmt)
    failed = [o.error for o in outcomes if o.error is not None]
    if failed:
        sys.exit(int(failed[0].code))


def _wait_all(api: Api, outcomes: list[plans.Outcome], timeout: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    done: dict[str, str] = {}
    for outcome in outcomes:
        if outcome.request is None or outcome.result == "cancelled":
            continue
        remaining = max(deadline - time.monotonic(), 0.0)
        final = wait.until_done(api, outcome.request["id"], timeout=remaining, label=outcome.change.target)
        done[outcome.change.target] = str(final.get("status"))
    return done


def main() -> None:
    cli(prog_name="berth")
