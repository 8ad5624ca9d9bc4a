"""The provider's claims: e-mail, name and the user's Django groups (scope "groups").

Two kinds of test user make it misbehave the way a broken or hostile path would: the ID token of
a user named "expired-…" expired an hour before it was issued, and that of "tampered-…" has its
groups rewritten to gpu-operators after signing, so its signature no longer verifies."""
import base64
import json
import time

from oauth2_provider.oauth2_validators import OAuth2Validator

EXPIRED_PREFIX = "expired-"
TAMPERED_PREFIX = "tampered-"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Validator(OAuth2Validator):
    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, "groups": "groups"}

    def get_additional_claims(self, request):
        user = request.user
        return {
            "preferred_username": user.username,
            "email": user.email,
            "given_name": user.first_name,
            "family_name": user.last_name,
            "groups": sorted(user.groups.values_list("name", flat=True)),
        }

    def get_id_token_dictionary(self, token, token_handler, request):
        claims, expiration = super().get_id_token_dictionary(token, token_handler, request)
        if request.user.username.startswith(EXPIRED_PREFIX):
            claims["exp"] = int(time.time()) - 3600
        return claims, expiration

    def finalize_id_token(self, id_token, token, token_handler, request):
        signed = super().finalize_id_token(id_token, token, token_handler, request)
        if not request.user.username.startswith(TAMPERED_PREFIX):
            return signed
        header, payload, signature = signed.split(".")
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        claims["groups"] = ["gpu-operators"]
        return ".".join([header, _b64(json.dumps(claims).encode()), signature])
