from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_eventmq", "0002_job_results"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobresult",
            name="progress",
            field=models.JSONField(
                blank=True,
                help_text="The last progress the job reported (progress() or a yielded partial).",
                null=True,
            ),
        ),
    ]
