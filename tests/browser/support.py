"""What the browser tests share: a portal on a live server, signing in and out at the real provider,
screenshots, and axe-core accessibility checks.

Everything here drives the pages the way a person would: links, buttons and form fields found by
their labels and roles. The fixtures that build these objects are in conftest.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Locator, Page, ViewportSize, expect

ROOT = Path(__file__).resolve().parents[2]
BROWSER_TESTS = Path(__file__).resolve().parent
SCREENSHOTS = ROOT / "test-output" / "screenshots"
AXE_JS = BROWSER_TESTS / "node_modules" / "axe-core" / "axe.min.js"

VIEWPORT: ViewportSize = {"width": 1280, "height": 800}
# The machine has two cores shared with other test runs: waits are generous, failures still come in minutes.
ACTION_TIMEOUT_MS = 30_000
PROVISIONING_TIMEOUT_MS = 120_000
expect.set_options(timeout=20_000)

# Impacts that fail a page; "minor" and "moderate" are printed, not enforced.
BLOCKING_IMPACTS = ("serious", "critical")


@dataclass
class Portal:
    """The portal on pytest-django's live server, wired to the session's OIDC provider."""

    url: str
    issuer: str
    browser: Browser
    locale: str = "en-GB"
    contexts: list[BrowserContext] = field(default_factory=list)
    csp_violations: list[str] = field(default_factory=list)

    def at(self, path: str = "/") -> str:
        return self.url + path

    def new_page(self, *, bypass_csp: bool = False) -> Page:
        """A page in a fresh browser context: its own cookies, like a separate person's browser.

        ``ignore_https_errors`` is for the provider, whose certificate comes from a throwaway CA.
        ``bypass_csp`` only for pages that get axe-core injected; everywhere else the portal's
        Content-Security-Policy is enforced, and any violation fails the test (see conftest).
        """
        context = self.browser.new_context(
            viewport=VIEWPORT,
            ignore_https_errors=True,
            bypass_csp=bypass_csp,
            accept_downloads=True,
            locale=self.locale,
            timezone_id="UTC",
        )
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        context.set_default_navigation_timeout(ACTION_TIMEOUT_MS)
        if not bypass_csp:
            context.on("console", self._note_csp_violation)
        self.contexts.append(context)
        return context.new_page()

    def page_as(self, username: str, *, bypass_csp: bool = False) -> Page:
        """A fresh browser, signed in as ``username`` through the provider's real pages."""
        page = self.new_page(bypass_csp=bypass_csp)
        self.sign_in(page, username)
        return page

    def sign_in(self, page: Page, username: str, *, next_path: str = "/") -> None:
        """Portal → sign-in page → provider's login form → (consent, if asked) → back at ``next_path``."""
        page.goto(self.at(next_path))
        expect(page).to_have_url(re.compile(r"/login/"))
        page.get_by_role("link", name=re.compile(r"^Sign in with your organisation")).click()
        expect(page).to_have_url(re.compile("^" + re.escape(self.issuer) + "/"))
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(f"{username}-pass")
        page.locator("button[type=submit]").click()
        portal_main = page.locator("main#main")
        consent = page.get_by_role("button", name="Allow")
        expect(portal_main.or_(consent)).to_be_visible()
        if consent.is_visible():
            consent.click()
        expect(page).to_have_url(self.at(next_path))

    def sign_out(self, page: Page) -> None:
        """The portal's "Sign out", then the provider's confirmation, then back at the portal's sign-in page."""
        page.locator("header").get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(re.compile("^" + re.escape(self.issuer) + "/session/end"))
        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(re.compile("^" + re.escape(self.at("/login/"))))

    def close(self) -> None:
        for context in self.contexts:
            context.close()
        self.contexts.clear()

    def _note_csp_violation(self, message: ConsoleMessage) -> None:
        if message.type == "error" and "Content Security Policy" in message.text:
            self.csp_violations.append(f"{message.location.get('url', '?')}: {message.text}")


def screenshot(page: Page, name: str) -> Path:
    """The viewport (1280×800) as test-output/screenshots/<name>.png; the curated ones go to docs/screenshots/."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), animations="disabled", caret="hide")
    return path


def axe_violations(page: Page) -> list[dict]:
    """Run axe-core on the page as it is now; every violation, whatever its impact."""
    if page.evaluate("() => typeof window.axe === 'undefined'"):
        page.add_script_tag(content=AXE_JS.read_text())
    result = page.evaluate("async () => await window.axe.run(document, {resultTypes: ['violations']})")
    return result["violations"]


def blocking(violations: Iterable[dict]) -> list[dict]:
    return [v for v in violations if v.get("impact") in BLOCKING_IMPACTS]


def describe_violations(screen: str, violations: Iterable[dict]) -> str:
    """A readable account: rule, impact, help link, and where on the page (selector and HTML)."""
    lines = []
    for v in violations:
        lines.append(f"[{screen}] {v['id']} ({v['impact']}): {v['help']} — {v['helpUrl']}")
        for node in v["nodes"][:5]:
            lines.append(f"    at {json.dumps(node['target'])}: {node['html'][:200]}")
            if node.get("failureSummary"):
                lines.append("      " + node["failureSummary"].replace("\n", "\n      "))
        if len(v["nodes"]) > 5:
            lines.append(f"    … and {len(v['nodes']) - 5} more")
    return "\n".join(lines)


def shown_text(field: Locator) -> str:
    """What the browser shows in a form field, read from Chromium's accessibility tree: for a native date input
    that is its locale's own rendering (``03/15/2026`` in American English), which ``input.value`` never tells."""
    page = field.page
    field.evaluate("e => e.setAttribute('data-shown-text-probe', '')")
    cdp = page.context.new_cdp_session(page)
    try:
        found = cdp.send("Runtime.evaluate", {"expression": "document.querySelector('[data-shown-text-probe]')"})
        backend_id = cdp.send("DOM.describeNode", {"objectId": found["result"]["objectId"]})["node"]["backendNodeId"]
        nodes = {node["nodeId"]: node for node in cdp.send("Accessibility.getFullAXTree")["nodes"]}
    finally:
        cdp.detach()
        field.evaluate("e => e.removeAttribute('data-shown-text-probe')")
    (start,) = (node for node in nodes.values() if node.get("backendDOMNodeId") == backend_id)

    def texts(node: dict) -> Iterator[str]:
        if node.get("role", {}).get("value") == "StaticText":
            yield node["name"]["value"]
            return
        for child in node.get("childIds", []):
            yield from texts(nodes[child])

    return "".join(texts(start))


def alices_ready_tenant(cluster):  # -> tenants.models.Tenant
    """Alice's small-tier tenant "ledger" on ``cluster``, made ready by the services (nothing provisions it).

    Alice exists once she has signed in (``portal.page_as("alice")``)."""
    from tenants import services
    from tenants.models import Membership, Tenant, TenantRequest, Tier, User

    alice = User.objects.get(username="alice")
    req = services.request_submit(
        actor=alice,
        action=TenantRequest.Action.CREATE,
        team=Membership.objects.get(user=alice).team,
        name="ledger",
        tier=Tier.objects.get(name="small"),
        cluster=cluster,
        purpose="The payments ledger.",
    )
    tenant = services.tenant_mark_provisioning(tenant=Tenant.objects.get(pk=req.tenant_id))
    return services.tenant_mark_ready(tenant=tenant, applied_generation=tenant.generation)
