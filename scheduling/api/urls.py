from rest_framework.routers import SimpleRouter

from scheduling.quota_requests.api import QuotaRequestViewSet

router = SimpleRouter(trailing_slash=True)
router.register("quota-requests", QuotaRequestViewSet, basename="quota-request")
urlpatterns = router.urls
