from django.urls import path

from investigations import views

app_name = "investigations"
urlpatterns = [
    path("investigations/open/", views.open_from_home, name="open_from_home"),
    path(
        "deployments/<uuid:deployment_id>/investigations/new/",
        views.open_investigation,
        name="open",
    ),
    path("investigations/<uuid:investigation_id>/", views.investigation_detail, name="detail"),
    path("investigations/<uuid:investigation_id>/tree/", views.investigation_tree, name="tree"),
    path(
        "investigations/<uuid:investigation_id>/evidence/",
        views.investigation_evidence,
        name="evidence",
    ),
    path("investigations/<uuid:investigation_id>/decide/", views.decide, name="decide"),
    path("investigations/<uuid:investigation_id>/fix/", views.record_fix, name="record_fix"),
    path(
        "investigations/<uuid:investigation_id>/severity/",
        views.set_severity,
        name="set_severity",
    ),
    path(
        "investigations/<uuid:investigation_id>/incident-status/",
        views.set_status,
        name="set_status",
    ),
    path("investigations/<uuid:investigation_id>/roles/", views.assign_role, name="assign_role"),
    path("investigations/<uuid:investigation_id>/close/", views.close, name="close"),
    path("investigations/<uuid:investigation_id>/gate.yml", views.gate_rules, name="gate"),
    path("investigations/<uuid:investigation_id>/audit/", views.audit_log, name="audit"),
    path("deployments/<uuid:deployment_id>/", views.deployment_detail, name="deployment"),
    path(
        "deployments/<uuid:deployment_id>/targets/",
        views.deployment_targets,
        name="deployment_targets",
    ),
    path(
        "deployments/<uuid:deployment_id>/simulator-clock/",
        views.simulator_clock,
        name="simulator_clock",
    ),
    path("deployments/<uuid:deployment_id>/targets/new/", views.add_target, name="add_target"),
    path(
        "deployments/<uuid:deployment_id>/targets/<uuid:target_id>/toggle/",
        views.toggle_target,
        name="toggle_target",
    ),
]
