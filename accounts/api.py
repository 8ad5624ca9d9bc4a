"""Personal access tokens over the API: list yours, create one (its key in the answer, once), revoke."""
from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response

from core.actors import Actor
from core.fields import StrictCharField
from core.filters import SearchFilter
from core.models import PersonalAccessToken, TokenScope
from core.parsers import StrictJSONParser
from core.tokens import DEFAULT_DAYS, MAX_DAYS, MAX_NAME_LENGTH, token_create, token_revoke


class TokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = PersonalAccessToken
        fields = ["id", "name", "prefix", "scopes", "created_at", "expires_at", "last_used_at", "revoked_at"]
        read_only_fields = fields


class TokenCreateSerializer(serializers.Serializer):
    name = StrictCharField(max_length=MAX_NAME_LENGTH)
    expires_in_days = serializers.IntegerField(min_value=1, max_value=MAX_DAYS, default=DEFAULT_DAYS)
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=TokenScope.choices), default=list,
                                   max_length=len(TokenScope.values))


class TokenCreatedSerializer(TokenSerializer):
    key = serializers.CharField(help_text="The clear key: shown in this answer only.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "key"]
        read_only_fields = fields


def _no_wider_than_caller(request, scopes: list[str]) -> None:
    """A scoped token may only mint tokens with a subset of its own scopes: otherwise a
    submit-only token could make itself an operator one."""
    caller = request.auth
    if isinstance(caller, PersonalAccessToken) and caller.scopes:
        wider = sorted(set(scopes or TokenScope.values) - set(caller.scopes))
        if wider:
            raise PermissionDenied(f"Token {caller.prefix}… cannot create a token with the scope {wider[0]!r} "
                                   "it does not have itself.")


@extend_schema_view(list=extend_schema(summary="List your personal access tokens",
                                       description="`?search=` matches the token's name and key prefix."))
class TokenViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = TokenSerializer
    filter_backends = [SearchFilter]
    search_fields = ["name", "prefix"]
    search_help = "the token's name or key prefix"
    parser_classes = [StrictJSONParser]  # the schema's one request type: a form has no null or list
    queryset = PersonalAccessToken.objects.none()  # the schema's model; requests get the person's own

    def get_queryset(self):
        return PersonalAccessToken.objects.filter(user=self.request.user)

    @extend_schema(summary="Create a personal access token", request=TokenCreateSerializer,
                   responses={201: TokenCreatedSerializer})
    def create(self, request):
        payload = TokenCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data = payload.validated_data
        _no_wider_than_caller(request, data["scopes"])
        try:
            token, key = token_create(user=request.user, name=data["name"], days=data["expires_in_days"],
                                      scopes=data["scopes"], actor=Actor.from_request(request))
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from exc
        token.key = key
        return Response(TokenCreatedSerializer(token).data, status=status.HTTP_201_CREATED)

    @extend_schema(summary="Revoke a personal access token", request=None, responses={200: TokenSerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        token = token_revoke(token=self.get_object(), actor=Actor.from_request(request))
        return Response(TokenSerializer(token).data)
