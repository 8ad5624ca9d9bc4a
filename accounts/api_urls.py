from rest_framework.routers import SimpleRouter

from .api import TokenViewSet

router = SimpleRouter()
router.register("tokens", TokenViewSet, basename="token")
urlpatterns = router.urls
