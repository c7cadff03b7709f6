from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0027_alert_last_seen"),
    ]

    operations = [
        migrations.AddField(
            model_name="webhookendpoint",
            name="consecutive_failures",
            field=models.PositiveIntegerField(db_default=0, default=0, editable=False),
        ),
        migrations.AddField(
            model_name="webhookendpoint",
            name="disabled_reason",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                editable=False,
                help_text="Why Berth turned the endpoint off by itself (empty: it did not); cleared when it is "
                "turned on.",
                max_length=300,
            ),
        ),
        migrations.AddField(
            model_name="webhookendpoint",
            name="disabled_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
    ]
