"""/api/v1/teams/, /cohorts/, /queues/, /priority-classes/, /preemptions/: the fleet's policy over HTTP.

Everyone signed in reads (a team member only their own teams and queues); operators write, through
scheduling.services.policy, the services the policy pages call. Input serializers state what a
schema can; the services decide the rest. A taken name and a change that would leave a cohort's
nominal quotas above the fleet's capacity (unless `confirm_overcommit` sends back the numbers the
409 answered, and they still hold) are 409s, and so is a delete
of something still in use (naming what uses it); other refusals 400s naming the field."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from django.db.models import Prefetch, Q
from django_filters import rest_framework as filters
from drf_spectacular.utils import OpenApiResponse, OpenApiTypes, extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, PermissionDenied, ValidationError
from rest_framework.response import Response

from core.actors import Actor
from core.fields import StrictBooleanField, StrictCharField
from core.filters import (
    SearchFilter,
    StrictBooleanFilter,
    StrictFilterBackend,
    UtcDateTimeFilter,
    search_matches,
    search_parameter,
    search_terms,
)
from core.parsers import StrictJSONParser
from core.permissions import ReadOnlyOrOperator
from core.refusals import InUse
from fleet.models import GpuFlavor
from scheduling import limits
from scheduling.models import Cohort, Preemption, PriorityClass, Queue, QueueQuota, Team, TeamMembership
from scheduling.quota_requests.selectors import sees_all_teams
from scheduling.selectors import queue_usage, usage_book
from scheduling.services import policy, policy_delete

from .serializers import QueueUsageSerializer

NAME_LOOKUP = r"[^/]+"
NAME_LENGTH = 64
TEXT_LENGTH = limits.MAX_COMMENT_LENGTH


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "Conflicts with the fleet's current state."


CONFLICT = OpenApiResponse(
    OpenApiTypes.OBJECT,
    description='The name is taken ({"name": [...]}), or the change would leave a cohort\'s nominal quotas of a '
    'flavor above the fleet\'s GPUs of it: {"confirm_overcommit": ["Cohort c\'s nominal quotas of H100 would add '
    'up to 40 GPUs (now 32), above the 32 H100 GPUs in the fleet. ..."], "over_capacity": [{"cohort", "flavor", '
    '"nominal_before", "nominal_after", "capacity"}]}; send the over_capacity list back as confirm_overcommit to '
    'save it anyway (audited). If the numbers changed meanwhile (capacity shrank, another change landed), the '
    'answer is this 409 again, with the new numbers.',
)


IN_USE = OpenApiResponse(OpenApiTypes.OBJECT, description=(
    'Still in use, nothing deleted: {"detail": "queue q-train has 3 pending/running workloads", "in_use": '
    '["queue q-train has 3 pending/running workloads", ...]}'))


def in_use_conflict(exc: InUse) -> APIException:
    conflict = Conflict()
    conflict.detail = {"detail": "; ".join(exc.uses), "in_use": exc.uses}
    return conflict


def call_policy(fn, **kwargs):
    """The service's refusals as HTTP answers: taken names, unconfirmed excesses and deletes of
    what is still in use 409, other ValidationErrors 400 keyed by field, PermissionDenied 403."""
    try:
        return fn(**kwargs)
    except InUse as exc:
        raise in_use_conflict(exc) from exc
    except policy.OverCapacity as exc:
        conflict = Conflict()
        conflict.detail = {  # set after __init__, which would turn the numbers into strings
            "confirm_overcommit": exc.message_dict["confirm_overcommit"],
            "over_capacity": policy.excess_rows(exc.excesses),
        }
        raise conflict from exc
    except DjangoValidationError as exc:
        if not hasattr(exc, "error_dict"):
            raise ValidationError({"non_field_errors": exc.messages}) from exc
        codes = {e.code for errors in exc.error_dict.values() for e in errors}
        raise (Conflict if codes == {policy.UNIQUE} else ValidationError)(exc.message_dict) from exc
    except DjangoPermissionDenied as exc:
        raise PermissionDenied(str(exc) or None) from exc


def _name_field(**kwargs) -> StrictCharField:
    return StrictCharField(max_length=NAME_LENGTH, **kwargs)


def _text_field() -> StrictCharField:
    return StrictCharField(required=False, allow_blank=True, max_length=TEXT_LENGTH)


class PolicyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                    mixins.UpdateModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """Read for everyone signed in, create, PATCH and DELETE for operators, objects by name."""

    permission_classes = [ReadOnlyOrOperator]
    parser_classes = [StrictJSONParser]  # the schema's one request type
    filter_backends = [StrictFilterBackend, SearchFilter]
    lookup_field = "name"
    lookup_value_regex = NAME_LOOKUP
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    input_serializer: type[serializers.Serializer]

    def _input(self, *, partial: bool = False) -> dict:
        body = self.input_serializer(data=self.request.data, partial=partial)
        body.is_valid(raise_exception=True)
        return dict(body.validated_data)

    def _answer(self, obj, code=status.HTTP_200_OK) -> Response:
        fresh = self.get_queryset().get(pk=obj.pk)
        return Response(self.get_serializer(fresh).data, status=code)

    def create(self, request, *args, **kwargs):
        obj = call_policy(self.create_service, actor=Actor.from_request(request), **self._input())
        return self._answer(obj, status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        obj = self.get_object()
        obj = call_policy(self.update_service, actor=Actor.from_request(request),
                          **{self.target: obj}, **self._input(partial=True))
        return self._answer(obj)

    def destroy(self, request, *args, **kwargs):
        call_policy(self.delete_service, actor=Actor.from_request(request), **{self.target: self.get_object()})
        return Response(status=status.HTTP_204_NO_CONTENT)


def _write_schema(output, input_, kind: str):
    bad = OpenApiResponse(OpenApiTypes.OBJECT, description="Invalid input, keyed by field")
    return {
        "create": extend_schema(request=input_, responses={201: output, 400: bad, 409: CONFLICT}),
        "partial_update": extend_schema(request=input_, responses={200: output, 400: bad, 409: CONFLICT}),
        "destroy": extend_schema(summary=f"Delete a {kind}", description=(
            f"Only a {kind} nothing uses any more: a 409 names what still does (workloads of any state, quota "
            "requests, queues). Audited. Operators only."), responses={204: None, 409: IN_USE}),
    }


# --- teams ---------------------------------------------------------------------------------------


class TeamSerializer(serializers.ModelSerializer):
    email = serializers.CharField(read_only=True, help_text="Where notifications for the team go; may be empty")
    members = serializers.SerializerMethodField()
    queues = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)

    class Meta:
        model = Team
        fields = ["id", "name", "description", "email", "members", "queues"]
        read_only_fields = fields

    def get_members(self, team: Team) -> list[str]:
        return sorted(m.user.get_username() for m in team.memberships.all())


class TeamInputSerializer(serializers.Serializer):
    name = _name_field()
    description = _text_field()
    email = serializers.EmailField(required=False, allow_blank=True, max_length=254)


class MemberInputSerializer(serializers.Serializer):
    username = StrictCharField(max_length=150)


class TeamFilter(filters.FilterSet):
    member = filters.CharFilter(field_name="memberships__user__username", help_text="Teams this user is in")

    class Meta:
        model = Team
        fields = ["member"]


@extend_schema_view(
    list=extend_schema(summary="List teams", description="Operators and viewers see every team; a team member "
                       "their own teams. `?search=` matches name, description and e-mail."),
    retrieve=extend_schema(summary="Get a team by name, with its members and queues"),
    **_write_schema(TeamSerializer, TeamInputSerializer, "team"),
)
class TeamViewSet(PolicyViewSet):
    serializer_class = TeamSerializer
    input_serializer = TeamInputSerializer
    filterset_class = TeamFilter
    search_fields = ["name", "description", "email"]
    create_service = staticmethod(policy.team_create)
    update_service = staticmethod(policy.team_update)
    delete_service = staticmethod(policy_delete.team_delete)
    target = "team"

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # drf-spectacular reads the model without a user
            return Team.objects.none()
        user = self.request.user
        qs = Team.objects.prefetch_related(
            Prefetch("memberships", queryset=TeamMembership.objects.select_related("user")), "queues"
        )
        if not sees_all_teams(user):
            qs = qs.filter(memberships__user=user)
        return qs.distinct() if self.action == "list" else qs

    @extend_schema(summary="List a team's members", description="Usernames, sorted; `?search=` matches them.",
                   parameters=[search_parameter("the username")],
                   responses={200: serializers.ListSerializer(child=serializers.CharField())})
    @action(detail=True, methods=["get"], url_path="members", pagination_class=None, filter_backends=[])
    def members(self, request, name=None):
        terms = search_terms(request)
        members = self.get_serializer(self.get_object()).data["members"]
        return Response([username for username in members if search_matches(terms, username)])

    @extend_schema(summary="Add a member to a team", description="Idempotent; audited. Operators only.",
                   request=MemberInputSerializer,
                   responses={201: TeamSerializer, 400: OpenApiResponse(
                       OpenApiTypes.OBJECT, description='Invalid input, keyed by field: {"username": ["No such '
                       'user."]}')})
    @members.mapping.post
    def member_add(self, request, name=None):
        team = self.get_object()
        user = _user(MemberInputSerializer, request.data)
        call_policy(policy.team_member_add, actor=Actor.from_request(request), team=team, user=user)
        return self._answer(team, status.HTTP_201_CREATED)

    @extend_schema(summary="Remove a member from a team", description="Audited. Operators only.", request=None,
                   responses={200: TeamSerializer})
    @action(detail=True, methods=["delete"], url_path=r"members/(?P<username>[^/]+)")
    def member_remove(self, request, name=None, username=None):
        team = self.get_object()
        user = get_user_model().objects.filter(username=username).first()
        if user is None or not call_policy(policy.team_member_remove, actor=Actor.from_request(request), team=team,
                                           user=user):
            return Response({"detail": f"{username} is not a member of {team.name}."},
                            status=status.HTTP_404_NOT_FOUND)
        return self._answer(team)


def _user(serializer_class, data):
    body = serializer_class(data=data)
    body.is_valid(raise_exception=True)
    user = get_user_model().objects.filter(username=body.validated_data["username"]).first()
    if user is None:
        raise ValidationError({"username": ["No such user."]})
    return user


# --- cohorts -------------------------------------------------------------------------------------


class CohortQuotaSerializer(serializers.Serializer):
    flavor = serializers.CharField()
    nominal = serializers.IntegerField(help_text="The cohort's queues' nominal quotas of the flavor, summed")
    capacity = serializers.IntegerField(help_text="The fleet's GPUs of the flavor")


class CohortSerializer(serializers.ModelSerializer):
    queues = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)
    quotas = serializers.SerializerMethodField(help_text="Per flavor: the cohort's nominal quotas summed, and the "
                                               "fleet's GPUs of the flavor (its capacity)")

    class Meta:
        model = Cohort
        fields = ["id", "name", "queues", "quotas"]
        read_only_fields = fields

    @extend_schema_field(CohortQuotaSerializer(many=True))
    def get_quotas(self, cohort: Cohort) -> list[dict]:
        sums: dict[str, int] = {}
        ids: dict[str, int] = {}
        for queue in cohort.queues.all():
            for quota in queue.quotas.all():
                sums[quota.flavor.name] = sums.get(quota.flavor.name, 0) + quota.nominal
                ids[quota.flavor.name] = quota.flavor_id
        return [{"flavor": name, "nominal": sums[name], "capacity": policy.flavor_capacity(ids[name])}
                for name in sorted(sums)]


class CohortInputSerializer(serializers.Serializer):
    name = _name_field()


@extend_schema_view(
    list=extend_schema(summary="List cohorts", description="`?search=` matches the name."),
    retrieve=extend_schema(summary="Get a cohort by name, with its queues and nominal quotas per flavor"),
    **_write_schema(CohortSerializer, CohortInputSerializer, "cohort"),
)
class CohortViewSet(PolicyViewSet):
    serializer_class = CohortSerializer
    input_serializer = CohortInputSerializer
    search_fields = ["name"]
    create_service = staticmethod(policy.cohort_create)
    update_service = staticmethod(policy.cohort_update)
    delete_service = staticmethod(policy_delete.cohort_delete)
    target = "cohort"
    queryset = Cohort.objects.prefetch_related(
        Prefetch("queues", queryset=Queue.objects.prefetch_related(
            Prefetch("quotas", queryset=QueueQuota.objects.select_related("flavor"))))
    )

# --- queues and quotas ---------------------------------------------------------------------------


class QuotaSerializer(serializers.ModelSerializer):
    flavor = serializers.CharField(source="flavor.name")
    used = serializers.SerializerMethodField()
    borrowed = serializers.SerializerMethodField()
    lent = serializers.SerializerMethodField()
    pending_demand = serializers.SerializerMethodField()

    class Meta:
        model = QueueQuota
        fields = ["flavor", "nominal", "borrowing_limit", "lending_limit", "used", "borrowed", "lent",
                  "pending_demand"]
        read_only_fields = fields

    def _usage(self, quota: QueueQuota, name: str) -> int:
        usage = self.context.get("usage", {}).get((quota.queue_id, quota.flavor_id))
        return getattr(usage, name) if usage is not None else 0

    def get_used(self, quota: QueueQuota) -> int:
        return self._usage(quota, "in_use")

    def get_borrowed(self, quota: QueueQuota) -> int:
        return self._usage(quota, "borrowed")

    def get_lent(self, quota: QueueQuota) -> int:
        return self._usage(quota, "lent")

    def get_pending_demand(self, quota: QueueQuota) -> int:
        return self._usage(quota, "pending_demand")


QUEUE_EXTRA = list(policy.QUEUE_EXTRA_FIELDS)


class QueueSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name")
    cohort = serializers.CharField(source="cohort.name", default=None, allow_null=True)
    quotas = QuotaSerializer(many=True, help_text="Quota per flavor, with the numbers in use now")

    class Meta:
        model = Queue
        fields = ["id", "name", "team", "cohort", *QUEUE_EXTRA, "quotas"]
        read_only_fields = fields


class QuotaInputSerializer(serializers.Serializer):
    flavor = serializers.SlugRelatedField(slug_field="name", queryset=GpuFlavor.objects.all())
    nominal = serializers.IntegerField(min_value=0, max_value=limits.MAX_QUOTA_GPUS, help_text="GPUs guaranteed")
    borrowing_limit = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=0, max_value=limits.MAX_QUOTA_GPUS,
        help_text="Most GPUs the queue may borrow from its cohort; null = unlimited")
    lending_limit = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=0, max_value=limits.MAX_QUOTA_GPUS,
        help_text="Most idle nominal GPUs the cohort may borrow, at most nominal; null = all")


class ExcessSerializer(serializers.Serializer):
    """One excess a 409 warned about, sent back to confirm it."""

    cohort = StrictCharField(max_length=NAME_LENGTH)
    flavor = StrictCharField(max_length=NAME_LENGTH)
    nominal_before = serializers.IntegerField(min_value=0)
    nominal_after = serializers.IntegerField(min_value=0)
    capacity = serializers.IntegerField(min_value=0)


class QueueInputSerializer(serializers.ModelSerializer):
    """Extra policy fields (the reclaim policy) come from the model, with its choices."""

    serializer_field_mapping = {**serializers.ModelSerializer.serializer_field_mapping,
                                models.BooleanField: StrictBooleanField}

    name = _name_field()
    team = serializers.SlugRelatedField(slug_field="name", queryset=Team.objects.all())
    cohort = serializers.SlugRelatedField(slug_field="name", queryset=Cohort.objects.all(), required=False,
                                          allow_null=True, default=None)
    quotas = QuotaInputSerializer(many=True, required=False, max_length=64,
                                  help_text="Every quota of the queue, one per flavor; on PATCH they replace the "
                                  "queue's quotas (leave out to keep them)")
    confirm_overcommit = ExcessSerializer(many=True, required=False, max_length=64, help_text=(
        "Save even though the cohort's nominal quotas of a flavor would exceed the fleet's GPUs of it: the "
        "over_capacity list of the 409 that warned, as it was; numbers that no longer hold are refused again"))

    class Meta:
        model = Queue
        fields = ["name", "team", "cohort", *QUEUE_EXTRA, "quotas", "confirm_overcommit"]


class QueueFilter(filters.FilterSet):
    team = filters.CharFilter(field_name="team__name")
    cohort = filters.CharFilter(field_name="cohort__name")
    flavor = filters.CharFilter(field_name="quotas__flavor__name", help_text="Queues with a quota of this flavor")

    class Meta:
        model = Queue
        fields = ["team", "cohort", "flavor"]


def _quota_specs(rows: list[dict] | None) -> list[policy.QuotaSpec] | None:
    if rows is None:
        return None
    return [policy.QuotaSpec(flavor=r["flavor"], nominal=r["nominal"], borrowing_limit=r.get("borrowing_limit"),
                             lending_limit=r.get("lending_limit")) for r in rows]


@extend_schema_view(
    list=extend_schema(summary="List queues with their quotas", description=(
        "Quota per flavor (nominal, borrowing and lending limits) with what is used, borrowed, lent and asked for "
        "now. A team member sees their teams' queues. `?search=` matches queue and team names.")),
    retrieve=extend_schema(summary="Get a queue by name"),
    **_write_schema(QueueSerializer, QueueInputSerializer, "queue"),
)
class QueueViewSet(PolicyViewSet):
    serializer_class = QueueSerializer
    input_serializer = QueueInputSerializer
    filterset_class = QueueFilter
    search_fields = ["name", "team__name"]
    delete_service = staticmethod(policy_delete.queue_delete)
    target = "queue"

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # drf-spectacular reads the model without a user
            return Queue.objects.none()
        user = self.request.user
        qs = Queue.objects.select_related("team", "cohort").prefetch_related(
            Prefetch("quotas", queryset=QueueQuota.objects.select_related("flavor").order_by("flavor__name")))
        if not sees_all_teams(user):
            qs = qs.filter(team__memberships__user=user)
        return qs.distinct() if self.action == "list" else qs

    def get_serializer_context(self):
        # One usage computation for the page of queues (cohort lending needs every queue's numbers).
        context = super().get_serializer_context()
        if self.action != "usage":
            context["usage"] = usage_book().lines
        return context

    def _call(self, fn, **kwargs):
        body = self._input(partial=self.action == "partial_update")
        quotas = _quota_specs(body.pop("quotas", None))
        if quotas is not None or self.action == "create":
            body["quotas"] = quotas or []
        try:  # on a PATCH the rows' fields are not required by the schema, so the service checks them
            body["confirm_overcommit"] = policy.excesses_from_rows([dict(r) for r in body.pop("confirm_overcommit",
                                                                                              [])])
        except ValueError as exc:
            raise ValidationError({"confirm_overcommit": [str(exc)]}) from exc
        return call_policy(fn, actor=Actor.from_request(self.request), **kwargs, **body)

    def create(self, request, *args, **kwargs):
        return self._answer(self._call(policy.queue_create), status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        return self._answer(self._call(policy.queue_update, queue=self.get_object()))

    @extend_schema(summary="Quota use of every queue per flavor", description=(
        "Flat rows: nominal, used, borrowed, lent and pending demand, the queues page's numbers. `?search=` "
        "matches the queue, cohort and flavor names."),
        parameters=[search_parameter("the queue, cohort or flavor name")],
        responses={200: QueueUsageSerializer(many=True)})
    @action(detail=False, methods=["get"], url_path="usage", pagination_class=None, filter_backends=[])
    def usage(self, request):
        terms = search_terms(request)
        rows = [row for row in queue_usage() if search_matches(terms, row["queue"], row["cohort"], row["flavor"])]
        return Response(QueueUsageSerializer(rows, many=True).data)


# --- priority classes ----------------------------------------------------------------------------

PRIORITY_FIELDS = list(policy.priority_class_fields())


class PriorityClassSerializer(serializers.ModelSerializer):
    class Meta:
        model = PriorityClass
        fields = ["id", *PRIORITY_FIELDS]
        read_only_fields = fields


PRIORITY_VALUE = 1_000_000  # far beyond any class table; well inside an INTEGER column


class PriorityClassInputSerializer(serializers.ModelSerializer):
    serializer_field_mapping = {**serializers.ModelSerializer.serializer_field_mapping,
                                models.BooleanField: StrictBooleanField}
    name = _name_field()
    value = serializers.IntegerField(min_value=-PRIORITY_VALUE, max_value=PRIORITY_VALUE,
                                     help_text="Higher runs first; negative runs only on otherwise idle GPUs")
    description = _text_field()

    class Meta:
        model = PriorityClass
        fields = PRIORITY_FIELDS
        extra_kwargs = {
            **{name: {"max_value": limits.MAX_SECONDS}
               for name in ("grace_seconds", "min_runtime_seconds", "cooldown_seconds") if name in PRIORITY_FIELDS},
        }


@extend_schema_view(
    list=extend_schema(summary="List priority classes", description="Highest first. `?search=` matches name and "
                       "description."),
    retrieve=extend_schema(summary="Get a priority class by name"),
    **_write_schema(PriorityClassSerializer, PriorityClassInputSerializer, "priority class"),
)
class PriorityClassViewSet(PolicyViewSet):
    serializer_class = PriorityClassSerializer
    input_serializer = PriorityClassInputSerializer
    queryset = PriorityClass.objects.all()
    search_fields = ["name", "description"]
    create_service = staticmethod(policy.priority_class_create)
    update_service = staticmethod(policy.priority_class_update)
    delete_service = staticmethod(policy_delete.priority_class_delete)
    target = "priority_class"


# --- preemptions ---------------------------------------------------------------------------------


class PreemptionSerializer(serializers.ModelSerializer):
    victim = serializers.CharField(source="victim.name")
    victim_id = serializers.IntegerField()
    victim_team = serializers.CharField(source="victim.team.name")
    preemptor = serializers.CharField(source="preemptor.name", default=None, allow_null=True)
    preemptor_id = serializers.IntegerField(allow_null=True)
    preemptor_team = serializers.CharField(source="preemptor.team.name", default=None, allow_null=True)
    lost_gpu_hours = serializers.SerializerMethodField(
        help_text="Work since the victim's last checkpoint, in GPU-hours")

    class Meta:
        model = Preemption
        fields = ["id", "victim", "victim_id", "victim_team", "preemptor", "preemptor_id", "preemptor_team",
                  "reason", "message", "requested_at", "grace_seconds", "deadline", "completed_at", "lost_gpu_hours"]
        read_only_fields = fields

    def get_lost_gpu_hours(self, obj: Preemption) -> float:
        return round(obj.lost_gpu_seconds / 3600, 3)


class PreemptionFilter(filters.FilterSet):
    team = filters.CharFilter(method="filter_team", help_text="Preemptions whose victim or preemptor is this team's")
    victim_team = filters.CharFilter(field_name="victim__team__name")
    preemptor_team = filters.CharFilter(field_name="preemptor__team__name")
    reason = filters.CharFilter(field_name="reason")
    completed = StrictBooleanFilter(field_name="completed_at", lookup_expr="isnull", exclude=True,
                                    help_text="true: the victim has stopped; false: still in its grace period")
    since = UtcDateTimeFilter(field_name="requested_at", lookup_expr="gte")
    until = UtcDateTimeFilter(field_name="requested_at", lookup_expr="lt")

    class Meta:
        model = Preemption
        fields = ["team", "victim_team", "preemptor_team", "reason", "completed", "since", "until"]

    def filter_team(self, queryset, name, value):
        return queryset.filter(Q(victim__team__name=value) | Q(preemptor__team__name=value))


@extend_schema_view(
    list=extend_schema(summary="List preemptions", description="Newest first, with the GPU-hours each victim lost. "
                       "`?search=` matches victim, preemptor and message."),
    retrieve=extend_schema(summary="Get a preemption"),
)
class PreemptionViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = PreemptionSerializer
    filterset_class = PreemptionFilter
    filter_backends = [StrictFilterBackend, SearchFilter]
    search_fields = ["victim__name", "preemptor__name", "message"]
    queryset = Preemption.objects.select_related("victim__team", "preemptor__team")
