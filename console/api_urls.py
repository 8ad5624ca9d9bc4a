from rest_framework.routers import SimpleRouter

from .audit.api import AuditEventViewSet

router = SimpleRouter()
router.register("audit-events", AuditEventViewSet, basename="audit-event")
urlpatterns = router.urls
