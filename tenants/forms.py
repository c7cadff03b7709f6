"""Browser forms: they parse input and carry errors back to fields; the rules live in ``tenants.services``.

A service's ``ValidationError`` lands next to the field it names (``add_service_errors``);
names no form field carries become errors at the top of the form.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from typing import Any, cast

from django import forms
from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from tenants import services
from tenants.models import Cluster, EventType, Team, TenantKind, TenantRequest, Tier, WebhookEndpoint

ISO_DATE_FORMAT = "YYYY-MM-DD"
ISO_DATE_MESSAGE = f"Enter a date as {ISO_DATE_FORMAT}."
# 2026-03-15, or 20260315 (ISO 8601's basic form: a phone's digits-only keypad has no "-").
_ISO_DATE = re.compile(r"(\d{4})-?(\d{2})-?(\d{2})")


def parse_iso_date(value: str) -> dt.date:
    """An ISO 8601 calendar date, whatever the browser's language; anything else (03/15/2026) is a ValueError."""
    match = _ISO_DATE.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"not a date as {ISO_DATE_FORMAT}: {value!r}")
    return dt.date(*(int(part) for part in match.groups()))


class IsoDateInput(forms.DateInput):
    """A text input for an ISO date. A native date input shows and takes the browser's own format (03/15/2026 in
    American English) where the portal writes 2026-03-15 everywhere; its hint (the field's help text) says so."""

    input_type = "text"

    def __init__(self, attrs: dict | None = None) -> None:
        iso = {
            "inputmode": "numeric",
            "pattern": _ISO_DATE.pattern,
            "title": ISO_DATE_FORMAT,  # the browser adds it to its "match the requested format" message
            "autocomplete": "off",
            "spellcheck": "false",
            "maxlength": "10",
        }
        super().__init__(attrs={**iso, **(attrs or {})}, format="%Y-%m-%d")


class IsoDateField(forms.DateField):
    """A date typed as YYYY-MM-DD only: Django's default formats would also read 03/04/2026 as the 4th of March."""

    widget = IsoDateInput
    default_error_messages = {"invalid": ISO_DATE_MESSAGE}

    def to_python(self, value: object) -> dt.date | None:
        if value in self.empty_values:
            return None
        if isinstance(value, dt.date):
            return value
        try:
            return parse_iso_date(str(value))
        except ValueError:
            raise ValidationError(self.error_messages["invalid"], code="invalid") from None


ISO_TIME_FORMAT = "HH:MM"
# 19:00, or 1900: the 24-hour clock, as ISO 8601 writes it (basic form for the digits-only keypad again).
_ISO_TIME = re.compile(r"([01]\d|2[0-3]):?([0-5]\d)")


class IsoTimeInput(forms.TimeInput):
    """A text input for a time on the 24-hour clock: a native time input shows 07:00 PM in American English and
    keeps 07:30 typed there empty until AM or PM is chosen."""

    input_type = "text"

    def __init__(self, attrs: dict | None = None) -> None:
        iso = {
            "inputmode": "numeric",
            "pattern": _ISO_TIME.pattern,
            "title": f"{ISO_TIME_FORMAT}, 24-hour",
            "autocomplete": "off",
            "spellcheck": "false",
            "maxlength": "5",
        }
        super().__init__(attrs={**iso, **(attrs or {})}, format="%H:%M")


class IsoTimeField(forms.TimeField):
    widget = IsoTimeInput
    default_error_messages = {"invalid": f"Enter a time as {ISO_TIME_FORMAT} on the 24-hour clock."}

    def to_python(self, value: object) -> dt.time | None:
        if value in self.empty_values:
            return None
        if isinstance(value, dt.time):
            return value
        match = _ISO_TIME.fullmatch(str(value).strip())
        if match is None:
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        return dt.time(int(match[1]), int(match[2]))


class BerthForm(forms.Form):
    """Forms whose ``ValidationError`` may also come from a service after ``is_valid()``."""

    def model_choices(self, name: str) -> forms.ModelChoiceField[Any]:
        return cast("forms.ModelChoiceField[Any]", self.fields[name])

    def queryset_of(self, name: str) -> QuerySet[Any]:
        queryset = self.model_choices(name).queryset
        assert queryset is not None  # every model choice field here is given one
        return queryset

    def choices(self, name: str) -> forms.ChoiceField:
        return cast(forms.ChoiceField, self.fields[name])

    def add_service_errors(self, exc: ValidationError) -> None:
        if not hasattr(exc, "error_dict"):
            self.add_error(None, exc.messages)
            return
        for field, messages in exc.message_dict.items():
            self.add_error(field if field in self.fields else None, messages)


class IdempotentForm(BerthForm):
    """Carries a key made when the form is first shown, so a repeated post makes one request."""

    action: str = ""  # the TenantRequest.Action a tenant-page form submits, if any

    idempotency_key = forms.CharField(widget=forms.HiddenInput, required=False, max_length=64)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not self.is_bound:
            self.initial.setdefault("idempotency_key", uuid.uuid4().hex)


class TierChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, tier: Tier) -> str:
        return tier.display_name


class RequestCreateForm(IdempotentForm):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    kind = forms.ChoiceField(label="Kind of tenant", choices=())
    name = forms.CharField(
        max_length=63,
        help_text="Lower-case letters, digits and '-'; it becomes the namespace name (after the cluster's prefix).",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false", "autocapitalize": "none"}),
    )
    tier = TierChoiceField(
        queryset=Tier.objects.none(), empty_label=None, help_text="Compare the tiers in the table below."
    )
    cluster = forms.ModelChoiceField(queryset=Cluster.objects.none(), empty_label=None)
    purpose = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="What will run here; approvers read this.",
    )
    requested_expiry = IsoDateField(
        label="Expiry date",
        required=False,
        help_text=f"{ISO_DATE_FORMAT}. Leave empty for the tier's default. "
        "The tenant is decommissioned after this day.",
    )

    def __init__(self, *args, teams: QuerySet[Team], tiers: QuerySet[Tier], clusters: list[Cluster], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.model_choices("team").queryset = teams
        self.model_choices("tier").queryset = tiers
        self.model_choices("cluster").queryset = Cluster.objects.filter(pk__in=[c.pk for c in clusters])
        offered = {kind for c in clusters for kind in c.kinds}
        self.choices("kind").choices = [(value, label) for value, label in TenantKind.choices if value in offered]


class ChangeTierForm(IdempotentForm):
    action = TenantRequest.Action.CHANGE_TIER
    tier = TierChoiceField(queryset=Tier.objects.none(), label="New tier", empty_label=None)
    purpose = forms.CharField(label="Why", required=False, widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, *args, tiers: QuerySet[Tier], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.model_choices("tier").queryset = tiers


class ExtendForm(IdempotentForm):
    action = TenantRequest.Action.EXTEND
    requested_expiry = IsoDateField(label="New expiry date", help_text=f"{ISO_DATE_FORMAT}, after the current expiry.")
    purpose = forms.CharField(label="Why", required=False, widget=forms.Textarea(attrs={"rows": 2}))


class DeleteRequestForm(IdempotentForm):
    action = TenantRequest.Action.DELETE
    purpose = forms.CharField(label="Why", required=False, widget=forms.Textarea(attrs={"rows": 2}))


TENANT_REQUEST_FORMS: dict[str, tuple[str, type[IdempotentForm]]] = {
    TenantRequest.Action.CHANGE_TIER: ("change", ChangeTierForm),
    TenantRequest.Action.EXTEND: ("extend", ExtendForm),
    TenantRequest.Action.DELETE: ("delete", DeleteRequestForm),
}


class ApproveForm(BerthForm):
    comment = forms.CharField(
        label="Comment", required=False, max_length=2000, widget=forms.TextInput(attrs={"placeholder": "Optional"})
    )


class RejectForm(BerthForm):
    # Optional here so the service's own message ("Say why…") is the one shown; the browser still insists.
    reason = forms.CharField(
        label="Reason",
        required=False,
        max_length=2000,
        widget=forms.TextInput(attrs={"required": True, "placeholder": "Required"}),
    )


class DecommissionForm(BerthForm):
    confirm_name = forms.CharField(
        label="Type the tenant's name to confirm",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    reason = forms.CharField(label="Reason", required=False, widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, *args, tenant_name: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.tenant_name = tenant_name
        self.fields["confirm_name"].widget.attrs.update(
            {"data-confirm-value": tenant_name, "data-confirm-button": "decommission-submit"}
        )

    def clean_confirm_name(self) -> str:
        value = self.cleaned_data["confirm_name"].strip()
        if value != self.tenant_name:
            raise ValidationError(f"Type {self.tenant_name} exactly.")
        return value


class ApiTokenForm(BerthForm):
    name = forms.CharField(max_length=100, help_text="Say where it is used, e.g. “CI for payments”.")
    expires_in_days = forms.IntegerField(label="Expires after (days)", min_value=1, max_value=365, initial=30)
    team = forms.ModelChoiceField(
        queryset=Team.objects.none(),
        required=False,
        empty_label="Personal (acts as you)",
        help_text="A team token acts for that team only; team owners can create them.",
    )

    def __init__(self, *args, teams: QuerySet[Team], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.model_choices("team").queryset = teams
        if not teams.exists():
            del self.fields["team"]


LIFETIME_CHOICES = [
    (600, "10 minutes"),
    (3600, "1 hour"),
    (4 * 3600, "4 hours"),
    (8 * 3600, "8 hours"),
    (12 * 3600, "12 hours"),
]


class KubeconfigForm(BerthForm):
    """How long the downloaded credential should last; choices stop at the tier's maximum."""

    lifetime_seconds = forms.TypedChoiceField(coerce=int, label="Valid for", choices=LIFETIME_CHOICES)

    def __init__(self, *args, tier: Tier, **kwargs):
        super().__init__(*args, **kwargs)
        self.choices("lifetime_seconds").choices = [
            c for c in LIFETIME_CHOICES if c[0] <= tier.max_credential_lifetime_seconds
        ]
        self.fields["lifetime_seconds"].initial = services.credential_lifetime_default(tier=tier)


class SleepScheduleForm(BerthForm):
    """A tenant's weekly sleep schedule, on the wall clock of its team's time zone."""

    start = IsoTimeField(required=False, label="Sleep from", help_text=f"{ISO_TIME_FORMAT}, every night, e.g. 19:00.")
    end = IsoTimeField(required=False, label="Wake at", help_text=f"{ISO_TIME_FORMAT}, the next morning, e.g. 07:00.")
    weekends = forms.BooleanField(required=False, label="Asleep all weekend (Saturday and Sunday)")


# --- Transfers ---------------------------------------------------------------------------------


class TransferForm(BerthForm):
    """Offer a tenant to another team; an owner of that team accepts."""

    target_team = forms.ModelChoiceField(
        queryset=Team.objects.none(), label="Receiving team", empty_label="Choose a team", to_field_name="slug"
    )
    purpose = forms.CharField(label="Why", required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))

    def __init__(self, *args, teams: QuerySet[Team], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.model_choices("target_team").queryset = teams


class DeclineForm(BerthForm):
    reason = forms.CharField(
        label="Reason", required=False, max_length=2000, widget=forms.TextInput(attrs={"placeholder": "Optional"})
    )


WEBHOOK_EVENT_CHOICES = [(e.value, f"{e.label} ({e.value})") for e in EventType if e != EventType.PING]


class WebhookEndpointForm(BerthForm):
    """A team's webhook endpoint on its page. The URL and the secret are written, never read back: both are
    sealed, and a URL's path may be a credential (a Slack webhook's is). The services check the rest."""

    name = forms.CharField(max_length=100, help_text="Say where it goes, e.g. “#payments-alerts”.")
    url = forms.CharField(
        max_length=2000,
        label="URL",
        help_text="https://… of the receiver (for Slack, the incoming webhook's URL). Public addresses only: it is "
        "checked now and before every delivery.",
        widget=forms.URLInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    format = forms.ChoiceField(choices=WebhookEndpoint.Format.choices, initial=WebhookEndpoint.Format.JSON)
    events = forms.MultipleChoiceField(choices=WEBHOOK_EVENT_CHOICES, widget=forms.CheckboxSelectMultiple)
    secret = forms.CharField(
        required=False,
        label="Signing secret",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="whsec_ and base64 of 24 to 64 bytes, if the receiver dictates one; leave empty to have one "
        "generated. It is shown once, after saving.",
    )
    is_active = forms.BooleanField(required=False, label="Active", initial=True)

    def __init__(self, *args, endpoint: WebhookEndpoint | None = None, **kwargs) -> None:
        if endpoint is not None:
            kwargs.setdefault("prefix", f"hook-{endpoint.pk}")
            kwargs.setdefault(
                "initial",
                {
                    "name": endpoint.name,
                    "format": endpoint.format,
                    "events": endpoint.events,
                    "is_active": endpoint.is_active,
                },
            )
        super().__init__(*args, **kwargs)
        self.endpoint = endpoint
        if endpoint is not None:
            del self.fields["secret"]  # rotated, never typed over
            url = self.fields["url"]
            url.required = False
            url.help_text = f"Now {endpoint.url_origin}/… (the path is not shown). Leave empty to keep it."
        else:
            del self.fields["is_active"]  # a new endpoint starts active
