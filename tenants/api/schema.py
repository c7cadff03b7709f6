"""OpenAPI descriptions of Berth's two API authentication schemes."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.api.authentication.ApiTokenAuthentication"
    name = "portalToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "A portal API token: `Token brt_…` (create one on the API tokens page).",
        }


class OidcBearerScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.api.authentication.OidcBearerAuthentication"
    name = "oidcBearer"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "An OIDC access token from the configured issuer with this API's audience.",
        }
