"""The Django app: wires settings, system checks and ``jobs`` module discovery."""

from __future__ import annotations

from django.apps import AppConfig
from django.core.signals import setting_changed
from django.utils.module_loading import autodiscover_modules


class DjangoEventMQConfig(AppConfig):
    """``django_eventmq`` in ``INSTALLED_APPS``."""

    name = "django_eventmq"
    verbose_name = "EventMQ"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_eventmq import checks, conf
        from django_eventmq import hooks as core_hooks
        from django_eventmq.runtime import config

        # The runtime (``.delay()``, the job manager) asks runtime.config for its
        # settings; from now on they come from settings.EVENTMQ + EMQ_*.
        config.set_provider(conf.get_settings)
        core_hooks.install()  # .delay_on_commit(), handle.status/.result/.cancel()
        setting_changed.connect(conf.on_setting_changed, dispatch_uid="django_eventmq.conf")
        checks.register_checks()
        # Like admin.py discovery: importing every app's jobs.py registers its
        # @job functions, in web processes and job-manager workers alike.
        autodiscover_modules("jobs")
        # Subscribers too, so an inline publish() (EAGER) reaches app handlers
        # without emq_subscribe running.
        autodiscover_modules("subscribers")
