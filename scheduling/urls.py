from django.urls import include, path

app_name = "scheduling"
urlpatterns: list = [
    path("", include("scheduling.quota_requests.urls")),
]
