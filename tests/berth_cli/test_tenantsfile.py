"""The tenants file format (berth.dev/v1): what it accepts, and every bad input reported with its YAML line."""

from __future__ import annotations

import datetime as dt

import pytest

from berth_cli.errors import Exit
from berth_cli.tenantsfile import MAX_BYTES, MAX_REPORTED, MAX_TENANTS, InvalidFile, parse

GOOD = b"""\
apiVersion: berth.dev/v1
kind: TenantList
teams: [team-a, team-b]
tenants:
  - name: web
    team: team-a
    cluster: dev
    tier: medium
    expires: 2030-03-31
    purpose: |
      Shop front.
      Second line.
  - name: no
    team: team-b
    cluster: dev
    tier: "010"
    kind: vcluster
"""


def problems(data: bytes) -> list[str]:
    with pytest.raises(InvalidFile) as raised:
        parse(data, "tenants.yaml")
    assert raised.value.code == Exit.INVALID
    return raised.value.details


def with_tenant(body: str) -> bytes:
    return b"apiVersion: berth.dev/v1\nkind: TenantList\nteams: [team-a]\ntenants:\n" + body.encode()


def test_a_good_file_keeps_every_value_as_written_with_its_line() -> None:
    parsed = parse(GOOD, "tenants.yaml")
    assert parsed.teams == ("team-a", "team-b")
    web, other = parsed.tenants
    assert (web.name, web.team, web.cluster, web.tier, web.kind) == ("web", "team-a", "dev", "medium", "namespace")
    assert web.expires == dt.date(2030, 3, 31)
    assert web.purpose == "Shop front.\nSecond line.\n"
    assert (web.line, web.line_of("tier"), web.line_of("expires")) == (5, 8, 9)
    # YAML 1.1 would read these as false and 8; a tenants file reads text as written.
    assert (other.name, other.tier, other.kind, other.line) == ("no", "010", "vcluster", 13)


def test_no_tenants_means_the_teams_should_have_none() -> None:
    parsed = parse(b"apiVersion: berth.dev/v1\nkind: TenantList\nteams: [team-a]\ntenants:\n", "t.yaml")
    assert parsed.tenants == ()


def test_every_problem_is_reported_with_its_line() -> None:
    found = problems(
        with_tenant(
            """\
  - name: Web_1
    team: team-b
    cluster: dev
    teir: small
  - name: api
    team: team-a
    cluster: dev
    tier: small
    tier: large
  - name: db
    team: team-a
    cluster: dev
    tier: small
    expires: 2030-02-30
    purpose: "bell\\a"
  - name: api
    team: team-a
    cluster: dev
    tier: small
"""
        )
    )
    assert found == [
        "tenants.yaml:5: tenants[0].name: 'Web_1' is not a DNS label (lowercase letters, digits, '-') "
        "(at most 63 characters)",
        "tenants.yaml:5: tenants[0]: tier is required",
        "tenants.yaml:6: tenants[0].team: 'team-b' is not in this file's teams (team-a)",
        "tenants.yaml:8: tenants[0]: unknown field 'teir'; did you mean 'tier'?",
        "tenants.yaml:13: tenants[1]: duplicate key 'tier' (first on line 12)",
        "tenants.yaml:18: tenants[2].expires: '2030-02-30' is not a date (YYYY-MM-DD)",
        "tenants.yaml:19: tenants[2].purpose: control characters are not allowed",
        "tenants.yaml:20: tenants[3]: dev/api is declared twice (first on line 9)",
    ]


def test_the_header_is_checked() -> None:
    assert problems(b"apiVersion: berth.dev/v2\nkind: Tenants\nteams: []\n") == [
        "tenants.yaml:1: apiVersion: 'berth.dev/v2' is not supported; this berth reads berth.dev/v1",
        "tenants.yaml:2: kind: 'Tenants' is not supported; must be TenantList",
        "tenants.yaml:3: teams: must be a non-empty list of team slugs",
    ]
    assert problems(b"tenants: []\n") == [
        "tenants.yaml:1: apiVersion: required (apiVersion: berth.dev/v1)",
        "tenants.yaml:1: kind: required (kind: TenantList)",
        "tenants.yaml:1: teams: required: the list of teams this file manages",
    ]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(b"", "tenants.yaml:1: the file is empty", id="empty"),
        pytest.param(
            b"- a\n- b\n", "tenants.yaml:1: must be a mapping with apiVersion, kind, teams, tenants", id="list"
        ),
        pytest.param(b"a: [1,\n", "tenants.yaml:2: not valid YAML", id="unclosed"),
        pytest.param(b"a: 1\n---\nb: 2\n", "tenants.yaml:2: not valid YAML: expected a single document", id="two-docs"),
        pytest.param(b"\xff\xfe\x00", "tenants.yaml:1: not UTF-8 text", id="not-utf8"),
        pytest.param(b"a: 1\nb: \xc3\x28\n", "tenants.yaml:2: not UTF-8 text", id="bad-utf8-line-2"),
        pytest.param(
            b"a: 1\nb: !!python/object/apply:os.system [echo pwned]\n",
            "tenants.yaml:2: not valid YAML: explicit tags (tag:yaml.org,2002:python/object/apply:os.system)",
            id="python-tag",
        ),
        pytest.param(b"a: !custom 1\n", "tenants.yaml:1: not valid YAML: explicit tags (!custom)", id="custom-tag"),
        pytest.param(b"a: " + b"[" * 10000 + b"]" * 10000, "nested too deeply", id="deep"),
        pytest.param(b"a: 1\n\x00: 2\n", "not valid YAML", id="nul"),
    ],
)
def test_malformed_files_are_refused_with_a_line(data: bytes, expected: str) -> None:
    (found,) = problems(data)
    assert expected in found


def test_a_billion_laughs_is_refused_before_anything_expands() -> None:
    laughs = b'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for level in "bcdefghi":
        previous = chr(ord(level) - 1)
        laughs += f"{level}: &{level} [{','.join(['*' + previous] * 9)}]\n".encode()
    assert problems(laughs) == ["tenants.yaml:1: not valid YAML: anchors and aliases (& and *) are not allowed"]


def test_a_merge_key_is_an_unknown_field_not_a_way_in() -> None:
    found = problems(with_tenant("  - name: web\n    <<: {tier: large}\n    team: team-a\n    cluster: dev\n"))
    assert "tenants.yaml:6: tenants[0]: unknown field '<<'" in found[1]


def test_oversized_files_and_values_are_refused() -> None:
    assert problems(b"#" * (MAX_BYTES + 1)) == [f"tenants.yaml:1: larger than {MAX_BYTES} bytes"]
    long_purpose = "x" * 2001
    found = problems(with_tenant(f"  - {{name: web, team: team-a, cluster: dev, tier: s, purpose: {long_purpose}}}\n"))
    assert found == ["tenants.yaml:5: tenants[0].purpose: at most 2000 characters"]
    found = problems(with_tenant(f"  - {{name: {'a' * 64}, team: team-a, cluster: dev, tier: s}}\n"))
    assert "is not a DNS label" in found[0] and found[0].startswith("tenants.yaml:5:")


def test_the_largest_file_allowed_is_read_whole() -> None:
    """1,000 tenants with every field stay within the values the reader composes."""
    teams = ", ".join(f"team-{i}" for i in range(100))
    entry = (
        "  - {{name: t{0}, team: team-{1}, cluster: dev, tier: small, kind: namespace, expires: 2030-01-01, "
        "purpose: p}}\n"
    )
    body = "".join(entry.format(i, i % 100) for i in range(MAX_TENANTS))
    data = f"apiVersion: berth.dev/v1\nkind: TenantList\nteams: [{teams}]\ntenants:\n{body}".encode()
    assert len(parse(data, "tenants.yaml").tenants) == MAX_TENANTS


def test_a_flood_of_problems_lists_the_first_and_counts_the_rest() -> None:
    with pytest.raises(InvalidFile) as raised:
        parse(with_tenant("".join(f"k{i}: 1\n" for i in range(MAX_REPORTED + 50))), "tenants.yaml")
    assert len(raised.value.problems) == MAX_REPORTED + 50
    assert raised.value.details[MAX_REPORTED - 1].startswith(f"tenants.yaml:{MAX_REPORTED + 4}: top level: unknown")
    assert raised.value.details[MAX_REPORTED:] == ["... and 50 more"]


@pytest.mark.parametrize(
    "value",
    ["web\u202egnp", "web\u0000", "../etc", "web;rm", "wéb", "-web", "web-", "", "~"],
    ids=["bidi", "nul", "path", "shell", "accent", "lead-dash", "trail-dash", "empty", "null"],
)
def test_hostile_names_are_refused(value: str) -> None:
    quoted = value.encode("unicode_escape").decode().replace('"', '\\"')
    document = f'  - {{name: "{quoted}", team: team-a, cluster: dev, tier: small}}\n' if value != "~" else None
    document = document or "  - {name: ~, team: team-a, cluster: dev, tier: small}\n"
    (found,) = problems(with_tenant(document))
    assert found.startswith("tenants.yaml:5: tenants[0].name:")


def test_structure_errors_name_the_place() -> None:
    found = problems(with_tenant("  - web\n  - name: [a, b]\n    team: team-a\n    cluster: dev\n    tier: s\n"))
    assert found == [
        "tenants.yaml:5: tenants[0]: must be a mapping (key: value)",
        "tenants.yaml:6: tenants[1].name: must be a single value, not a list or mapping",
    ]
    assert problems(b"apiVersion: berth.dev/v1\nkind: TenantList\nteams: [a, a]\ntenants: {}\n") == [
        "tenants.yaml:3: teams[1]: 'a' is listed twice (first on line 3)",
        "tenants.yaml:4: tenants: must be a list of tenants",
    ]
