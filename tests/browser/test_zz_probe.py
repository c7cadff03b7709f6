import pytest
from tests.browser.test_request_form import _filled_form, REQUEST_DETAIL
from playwright.sync_api import expect
pytestmark = [pytest.mark.django_db(transaction=True)]

def test_probe(portal, cluster):
    page = portal.page_as("alice")
    form = _filled_form(page, portal, "ledger")
    posts = []
    page.on("request", lambda r: posts.append(r.method) if r.method == "POST" else None)
    form.get_by_role("button", name="Submit request").dblclick()
    expect(page).to_have_url(REQUEST_DETAIL)
    print("POSTS", posts)
