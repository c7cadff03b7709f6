"""portal/settings.py, as the demo's environment configures it, with one more URL: one that fails
(tests/browser/urls_error.py). How tests/browser/test_error_pages.py reaches the demo's 500 page."""

from portal.settings import *  # noqa: F403

ROOT_URLCONF = "tests.browser.urls_error"
