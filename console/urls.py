from django.urls import include, path

from . import views
from .audit import views as audit_views

app_name = "console"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("audit/", audit_views.audit_page, name="audit"),
    path("audit.csv", audit_views.audit_csv, name="audit-csv"),
    path("policy/", include("console.policy.urls")),
    path("nodes/", views.nodes_table, name="nodes"),
    path("gpus/", views.gpus_table, name="gpus"),
    path("nodes/<str:name>/", views.node_page, name="node"),
    path("nodes/<str:name>/cordon/", views.node_action, {"action": "cordon"}, name="node-cordon"),
    path("nodes/<str:name>/gpus/<int:gpu_id>/mark-healthy/", views.gpu_mark_healthy_view, name="gpu-mark-healthy"),
    path("nodes/<str:name>/rotate-token/", views.node_token_rotate_view, name="node-rotate-token"),
    path("nodes/<str:name>/uncordon/", views.node_action, {"action": "uncordon"}, name="node-uncordon"),
]
