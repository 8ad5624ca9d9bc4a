from rest_framework.routers import DefaultRouter

from .flavors import FlavorViewSet
from .views import GpuViewSet, NodeViewSet, RackViewSet

router = DefaultRouter(trailing_slash=True)
router.register("racks", RackViewSet, basename="rack")
router.register("nodes", NodeViewSet, basename="node")
router.register("gpus", GpuViewSet, basename="gpu")
router.register("flavors", FlavorViewSet, basename="flavor")
urlpatterns = router.urls
