from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_eventmq", "0003_jobresult_progress"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobresult",
            name="workers",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="Worker process of each run (job manager:pid), redeliveries included.",
            ),
        ),
    ]
