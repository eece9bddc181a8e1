from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit log"

    def ready(self) -> None:
        # Each django-axes lockout is an audit entry (audit.lockouts, issue 19.7).
        from axes.signals import user_locked_out

        from audit.lockouts import record_lockout

        user_locked_out.connect(record_lockout, dispatch_uid="audit.login_lockout")
