"""Fleetdeck settings. Everything comes from the environment; with nothing set you get the
embedded laptop set-up: SQLite and a filesystem Celery broker under var/."""
import hashlib
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from .env import env_bool, env_int, env_list, env_map, env_secret, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("FLEETDECK_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY", "fleetdeck-insecure-dev-key-set-SECRET_KEY-in-production")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "django_tables2",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "core",
    "fleet",
    "scheduling",
    "health",
    "integrations.slurm",
    "integrations.prometheus",
    "integrations.kubernetes",
    "console",
    "demo",
    "accounts",
    "notifications",
]

MIDDLEWARE = [
    "core.middleware.RefuseNulInUrlMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "core.middleware.LoginRequiredMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "core.context_processors.roles",
                "core.context_processors.live_refresh",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'fleetdeck.sqlite3'}"),
        # A connection serves many requests and Celery tasks (config.celery): opening one per
        # request and per round task doubled the admission benchmark's wall time. Replaced after
        # this many seconds (0: one connection per request or task) and, with health checks (one
        # round trip per request or task), checked before each reuse, so a database restart
        # costs no failed request.
        conn_max_age=env_int("DB_CONN_MAX_AGE", 60),
        conn_health_checks=env_bool("DB_CONN_HEALTH_CHECKS", True),
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # WAL + a busy timeout let the demo's web, worker and beat share one SQLite file.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL;",
    }
else:
    # Fleetdeck's queries are short: PostgreSQL's JIT compiles any plan whose estimate looks
    # large (a young table's missing statistics are enough) and spends tens of ms doing so.
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = "-c jit=off"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "console:overview"
LOGOUT_REDIRECT_URL = "login"

# --- Single sign-on (OpenID Connect, accounts/oidc.py) -----------------------------------------
# On when OIDC_ISSUER_URL is set; the endpoints come from its /.well-known/openid-configuration
# unless given explicitly (OIDC_OP_*_ENDPOINT). PKCE is always on: the code is useless to
# whoever intercepts the redirect without the verifier only this browser session holds.
OIDC_ISSUER_URL = env_str("OIDC_ISSUER_URL", "")
OIDC_RP_CLIENT_ID = env_str("OIDC_CLIENT_ID", "")
OIDC_RP_CLIENT_SECRET = env_str("OIDC_CLIENT_SECRET", "")
OIDC_RP_SCOPES = env_str("OIDC_SCOPES", "openid email profile groups")
OIDC_RP_SIGN_ALGO = env_str("OIDC_SIGN_ALGO", "RS256")
OIDC_OP_AUTHORIZATION_ENDPOINT = env_str("OIDC_OP_AUTHORIZATION_ENDPOINT", "")
OIDC_OP_TOKEN_ENDPOINT = env_str("OIDC_OP_TOKEN_ENDPOINT", "")
OIDC_OP_USER_ENDPOINT = env_str("OIDC_OP_USER_ENDPOINT", "")
OIDC_OP_JWKS_ENDPOINT = env_str("OIDC_OP_JWKS_ENDPOINT", "")
OIDC_USE_PKCE = True
OIDC_TIMEOUT = env_int("OIDC_TIMEOUT", 10)
OIDC_CLOCK_LEEWAY_SECONDS = env_int("OIDC_CLOCK_LEEWAY_SECONDS", 30)
# The claim that lists a person's groups, and what the groups mean here, e.g.
# OIDC_GROUP_ROLES="gpu-operators=operator" and OIDC_GROUP_TEAMS="team-research=research".
OIDC_GROUPS_CLAIM = env_str("OIDC_GROUPS_CLAIM", "groups")
OIDC_GROUP_ROLES = env_map("OIDC_GROUP_ROLES")
OIDC_GROUP_TEAMS = env_map("OIDC_GROUP_TEAMS")
# true: no password logins at all (the login form and the admin's); a break-glass admin turns
# it off again for as long as needed.
OIDC_ONLY = env_bool("OIDC_ONLY", False)
LOGIN_REDIRECT_URL_FAILURE = "/login/"
AUTHENTICATION_BACKENDS = (["accounts.oidc.OIDCBackend"] if OIDC_ISSUER_URL else []) + (
    [] if OIDC_ONLY else ["django.contrib.auth.backends.ModelBackend"]
)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
# plotly.js (Plotly's basic partial bundle) and htmx are vendored in static/vendor/ and served from
# our own static URL: operators' networks are often air-gapped (static/vendor/README.md).
STATICFILES_DIRS = [BASE_DIR / "static"]
# The overview and queue pages refresh themselves in place this often (seconds, 1–15).
LIVE_REFRESH_SECONDS = env_int("LIVE_REFRESH_SECONDS", 15)
if not 1 <= LIVE_REFRESH_SECONDS <= 15:
    raise ImproperlyConfigured(f"LIVE_REFRESH_SECONDS must be between 1 and 15, not {LIVE_REFRESH_SECONDS}")
WHITENOISE_USE_FINDERS = True

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = env_bool("SECURE_COOKIES", False)

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "fleetdeck@localhost")
# Used by the SMTP backend (EMAIL_BACKEND=django.core.mail.backends.smtp.EmailBackend).
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "core.authentication.PersonalAccessTokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "core.pagination.BoundedLimitOffsetPagination",
    # JSON that no column or renderer can take (NUL, lone surrogates, deep nesting) is a 400.
    "DEFAULT_PARSER_CLASSES": [
        "core.parsers.StrictJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "PAGE_SIZE": 500,
    "DEFAULT_SCHEMA_CLASS": "core.schema.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Fleetdeck API",
    "DESCRIPTION": "Inventory, scheduling and health of a GPU fleet.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its docs page describe every endpoint: like the rest of the API, not for anonymous eyes.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    # Swagger UI from the installed sidecar package, never a CDN (air-gapped fleets).
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Several models have a `state`/`health` field; name each enum after its choices class.
    "ENUM_NAME_OVERRIDES": {
        "NodeStateEnum": "fleet.choices.NodeState",
        "GpuHealthEnum": "fleet.choices.GpuHealth",
        "SharingModeEnum": "fleet.choices.SharingMode",
        "ExecutorKindEnum": "fleet.choices.ExecutorKind",
        "WorkloadStateEnum": "scheduling.choices.WorkloadState",
        "QuotaRequestStateEnum": "scheduling.choices.QuotaRequestState",
        "TicketStateEnum": "health.choices.TicketState",
    },
}

# --- Celery -----------------------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL", "")
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_RESULT_BACKEND = REDIS_URL
else:
    # Embedded broker: kombu's filesystem transport, so the demo needs no Redis; core.broker's,
    # which never lets the web, worker and beat processes read each other's half-written files.
    _broker_dir = VAR_DIR / "broker"
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT = "core.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
    CELERY_RESULT_BACKEND = f"file://{VAR_DIR / 'results'}"
    # kombu's filesystem transport and result backend need their folders before the first task.
    for _folder in (_broker_dir / "queue", _broker_dir / "control", VAR_DIR / "results"):
        _folder.mkdir(parents=True, exist_ok=True)
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fixup closes every database connection around every task unless this is set;
# set, it closes them every this many tasks, and config.celery does Django's own per-request
# tidying per task instead (DB_CONN_MAX_AGE, health checks, broken connections dropped).
CELERY_DB_REUSE_MAX = 1000
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_EXPIRES = 3600
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE: dict = {
    # */5 * * * *: one usage sample per queue × flavor for the team charts and sizing signals.
    "quota_usage_sample": {"task": "scheduling.quota_usage_sample", "schedule": 300.0},
    # */15 * * * *: apply approved quota requests whose start came, end expired temporary boosts.
    "quota_requests_tick": {"task": "scheduling.quota_requests_tick", "schedule": 900.0},
}
# Task modules outside an app's tasks.py, which autodiscovery would not find.
CELERY_IMPORTS = ["scheduling.quota_requests.tasks"]

# --- Fleetdeck --------------------------------------------------------------------------------
FLEETDECK = {
    # Bearer token for GET /metrics; empty means open to any client that can reach it.
    "METRICS_TOKEN": env_str("METRICS_TOKEN", ""),
    "PLACEMENT_ROUND_SECONDS": env_int("PLACEMENT_ROUND_SECONDS", 2),
    # A round considers the first ROUND_QUEUE_DEPTH waiting workloads of each queue (in queue
    # order), like Slurm's default_queue_depth: a deep backlog does not slow every round down.
    # Those further back wait behind that many of their own queue; 0 considers every one. With
    # PROTECT_BLOCKED_GANGS, that many of each priority class (scheduling.snapshot.considered_window).
    "ROUND_QUEUE_DEPTH": env_int("ROUND_QUEUE_DEPTH", 16),
    # Lower priorities leave room for the gangs of higher priorities blocked with no known start
    # (scheduling.engine.protection); off: they may take any free GPU (best effort).
    "PROTECT_BLOCKED_GANGS": env_bool("PROTECT_BLOCKED_GANGS", False),
    # Each process keeps the fleet's scheduling state between rounds, updated from the change
    # journal (scheduling.state_cache), and reloads it whole at least this often as a safety net.
    "STATE_CACHE": env_bool("STATE_CACHE", True),
    "STATE_CACHE_RELOAD_SECONDS": env_int("STATE_CACHE_RELOAD_SECONDS", 300),
    # Fragmentation-aware placement keeps room for the replica shapes submitted over this many
    # days (0: plain best fit), the most frequent FRAGMENTATION_MIX_SHAPES of them.
    "FRAGMENTATION_HISTORY_DAYS": env_int("FRAGMENTATION_HISTORY_DAYS", 7),
    "FRAGMENTATION_MIX_SHAPES": env_int("FRAGMENTATION_MIX_SHAPES", 32),
    # Approvals may bring a flavor's nominal quotas to at most fleet capacity × this ratio
    # (1.0: never beyond capacity) unless the operator ticks "override", which is audited.
    "QUOTA_OVERSUBSCRIPTION_MAX": float(env_str("QUOTA_OVERSUBSCRIPTION_MAX", "1.0")),
    # Where people reach the web UI; e-mails (quota request notifications) link to pages under it.
    "PUBLIC_URL": env_str("PUBLIC_URL", "http://127.0.0.1:8000"),
    "NODE_STALE_SECONDS": env_int("NODE_STALE_SECONDS", 120),
    # Health loop: a node is quarantined at its 3rd NCCL timeout within 24 h; a running workload
    # without progress for 15 min is flagged, then requeued by the next watchdog check.
    # A source's timestamp (kernel line, agent event) further than this from the server clock is
    # replaced by the receive time; the skew is kept on the event.
    "CLOCK_SKEW_S": env_int("CLOCK_SKEW_S", 900),
    # One DCGM exposition, apart from the 5 MB body limit: a 16-GPU node's exposition of every
    # field, per MIG instance and pod, stays under 2 MiB; 4 MiB leaves room and bounds a runaway
    # exporter's payload to a few seconds of a worker.
    "DCGM_MAX_PAYLOAD_BYTES": env_int("DCGM_MAX_PAYLOAD_BYTES", 4 * 1024 * 1024),
    "NCCL_QUARANTINE_OFFENCES": env_int("NCCL_QUARANTINE_OFFENCES", 3),
    "NCCL_QUARANTINE_WINDOW_S": env_int("NCCL_QUARANTINE_WINDOW_S", 86400),
    "WATCHDOG_STALE_SECONDS": env_int("WATCHDOG_STALE_SECONDS", 900),
    # An executor's plain progress steps are written at most this often per workload.
    "PROGRESS_RECORD_SECONDS": env_int("PROGRESS_RECORD_SECONDS", 30),
    "DCGM_SCRAPE_SECONDS": env_int("DCGM_SCRAPE_SECONDS", 15),
    # Simulated DCGM telemetry for the demo's simulated nodes (demo/telemetry.py); rundemo
    # turns it on for its worker and beat. Never on a real fleet.
    "DEMO_TELEMETRY": env_bool("DEMO_TELEMETRY", False),
    # One exporter's whole answer must arrive within this (connecting within 2 s of it).
    "DCGM_SCRAPE_TIMEOUT_SECONDS": env_int("DCGM_SCRAPE_TIMEOUT_SECONDS", 5),
    # Slurm back-end (integrations/slurm): inventory sync, drain/resume mirroring, executor.
    "SLURM_ENABLED": env_bool("SLURM_ENABLED", False),
    "SLURM_SYNC_SECONDS": env_int("SLURM_SYNC_SECONDS", 30),
    "SLURM_BIN_DIR": env_str("SLURM_BIN_DIR", ""),
    "SLURM_CONF": env_str("SLURM_CONF", ""),
    "SLURM_COMMAND_TIMEOUT": env_int("SLURM_COMMAND_TIMEOUT", 10),
    "SLURM_CLUSTER_NAME": env_str("SLURM_CLUSTER_NAME", ""),
    "SLURM_PARTITION": env_str("SLURM_PARTITION", ""),
    "SLURM_DEFAULT_FLAVOR": env_str("SLURM_DEFAULT_FLAVOR", "H100-SXM-80GB"),
    # GRES type -> flavor name, e.g. "hopper=H100-SXM-80GB,a100=A100-SXM-40GB".
    "SLURM_GRES_FLAVORS": dict(i.split("=", 1) for i in env_list("SLURM_GRES_FLAVORS", []) if "=" in i),
    # What a Slurm job runs per replica, its shared directory, and where it reports progress.
    "SLURM_JOB_COMMAND": env_str("SLURM_JOB_COMMAND", ""),
    "SLURM_JOB_DIR": env_str("SLURM_JOB_DIR", str(VAR_DIR / "slurm-jobs")),
    "SLURM_HEARTBEAT_BASE_URL": env_str("SLURM_HEARTBEAT_BASE_URL", "http://127.0.0.1:8000"),
    # Prometheus (integrations/prometheus): with PROMETHEUS_URL the pages read utilisation and its
    # history from Prometheus (or Thanos, Mimir, VictoriaMetrics) through the recording rules in
    # integrations/prometheus/rules/, and Fleetdeck stores no per-minute GPU history of its own.
    "PROMETHEUS_URL": env_str("PROMETHEUS_URL", ""),
    "PROMETHEUS_BEARER_TOKEN": env_secret("PROMETHEUS_BEARER_TOKEN", ""),
    "PROMETHEUS_USERNAME": env_str("PROMETHEUS_USERNAME", ""),
    "PROMETHEUS_PASSWORD": env_secret("PROMETHEUS_PASSWORD", ""),
    "PROMETHEUS_CA_FILE": env_str("PROMETHEUS_CA_FILE", ""),
    # A query's whole answer must arrive within this; a page then shows "telemetry source unavailable".
    "PROMETHEUS_TIMEOUT_SECONDS": env_int("PROMETHEUS_TIMEOUT_SECONDS", 5),
    # An allocated GPU under 5 % SM activity for this long is listed as idle (either source).
    "IDLE_ALLOCATED_MINUTES": float(env_str("IDLE_ALLOCATED_MINUTES", "30")),
    # Alertmanager: with ALERTMANAGER_URL, automation's cordons and quarantines, repair tickets,
    # failed burn-ins, stopped gangs and waiting online inference are pushed to /api/v2/alerts.
    "ALERTMANAGER_URL": env_str("ALERTMANAGER_URL", ""),
    "ALERTMANAGER_BEARER_TOKEN": env_secret("ALERTMANAGER_BEARER_TOKEN", ""),
    "ALERTMANAGER_CA_FILE": env_str("ALERTMANAGER_CA_FILE", ""),
    "ALERTMANAGER_TIMEOUT_SECONDS": env_int("ALERTMANAGER_TIMEOUT_SECONDS", 5),
    "ALERTMANAGER_EVENT_TTL_SECONDS": env_int("ALERTMANAGER_EVENT_TTL_SECONDS", 3600),
    "INFERENCE_PRIORITY_CLASSES": env_list("INFERENCE_PRIORITY_CLASSES", ["inference-online"]),
    "INFERENCE_PENDING_ALERT_SECONDS": env_int("INFERENCE_PENDING_ALERT_SECONDS", 120),
    "INFERENCE_PENDING_CHECK_SECONDS": env_int("INFERENCE_PENDING_CHECK_SECONDS", 60),
    # The webhook Alertmanager posts to (/api/v1/alertmanager/webhook/) takes this bearer token; only
    # its SHA-256 is kept (set ALERTMANAGER_WEBHOOK_TOKEN_SHA256 to keep the token out of the environment).
    "ALERTMANAGER_WEBHOOK_TOKEN_SHA256": env_str("ALERTMANAGER_WEBHOOK_TOKEN_SHA256", "") or (
        hashlib.sha256(env_secret("ALERTMANAGER_WEBHOOK_TOKEN").encode()).hexdigest()
        if env_secret("ALERTMANAGER_WEBHOOK_TOKEN") else ""),
    # Kubernetes back-end (integrations/kubernetes): Node watch, cordon mirroring, Jobs admitted and
    # bound. Credentials: a kubeconfig file, else the pod's service account (in-cluster).
    "KUBERNETES_ENABLED": env_bool("KUBERNETES_ENABLED", False),
    "KUBERNETES_KUBECONFIG": env_str("KUBERNETES_KUBECONFIG", ""),
    "KUBERNETES_CONTEXT": env_str("KUBERNETES_CONTEXT", ""),
    "KUBERNETES_CLUSTER_NAME": env_str("KUBERNETES_CLUSTER_NAME", "kubernetes"),
    "KUBERNETES_POOL": env_str("KUBERNETES_POOL", "kubernetes"),
    # Which Nodes are Fleetdeck's (a label selector; empty: all of them).
    "KUBERNETES_NODE_SELECTOR": env_str("KUBERNETES_NODE_SELECTOR", ""),
    # Topology levels, as Kueue's Topology names them: level=label, e.g. "rack=fleetdeck.io/rack".
    "KUBERNETES_TOPOLOGY": dict(i.split("=", 1) for i in env_list("KUBERNETES_TOPOLOGY", []) if "=" in i),
    # Jobs Fleetdeck creates for workloads submitted through its API: namespace and image.
    "KUBERNETES_NAMESPACE": env_str("KUBERNETES_NAMESPACE", "default"),
    "KUBERNETES_JOB_IMAGE": env_str("KUBERNETES_JOB_IMAGE", "busybox:1.37"),
    "KUBERNETES_DEFAULT_PRIORITY_CLASS": env_str("KUBERNETES_DEFAULT_PRIORITY_CLASS", ""),
    # Jobs the watch imports at once (threads, each with a database connection of its own).
    "KUBERNETES_JOB_IMPORT_WORKERS": env_int("KUBERNETES_JOB_IMPORT_WORKERS", 4),
}
# Per-person notifications (notifications/): a webhook must answer within this many seconds, and
# (when the list is set, as it should be in production) its host must be one of these: exact names
# or "*.example.com" for a domain's subdomains. Anyone may enter a webhook URL, and the worker posts
# from inside the network, so without the list a URL could aim it at internal services (SSRF).
NOTIFICATIONS = {
    "WEBHOOK_TIMEOUT_SECONDS": float(env_str("NOTIFICATIONS_WEBHOOK_TIMEOUT_SECONDS", "5")),
    "WEBHOOK_ALLOWED_HOSTS": [h.lower() for h in env_list("NOTIFICATIONS_WEBHOOK_ALLOWED_HOSTS", [])],
}
if FLEETDECK["SLURM_ENABLED"]:
    CELERY_BEAT_SCHEDULE["slurm_inventory_sync"] = {
        "task": "slurm.inventory_sync",
        "schedule": float(FLEETDECK["SLURM_SYNC_SECONDS"]),
    }
# Every PLACEMENT_ROUND_SECONDS (2 s): a placement round, and a simulated-executor tick (progress,
# checkpoints, completions, preemption deadlines). Submissions and finishes also trigger a round.
CELERY_BEAT_SCHEDULE["placement_round"] = {
    "task": "scheduling.placement_round",
    "schedule": float(FLEETDECK["PLACEMENT_ROUND_SECONDS"]),
    "options": {"expires": float(FLEETDECK["PLACEMENT_ROUND_SECONDS"])},
}
# Health: */15 s scrape every node's dcgm-exporter (not with Prometheus as the telemetry source:
# Prometheus scrapes them and its alerts bring the health signals); every 30 s mark silent nodes
# unknown; every 5 min the zombie watchdog; hourly prune the one-minute GPU history to 7 days.
if not FLEETDECK["PROMETHEUS_URL"]:
    CELERY_BEAT_SCHEDULE["health_exporters_scrape"] = {
        "task": "health.exporters_scrape",
        "schedule": float(FLEETDECK["DCGM_SCRAPE_SECONDS"]),
        "options": {"expires": float(FLEETDECK["DCGM_SCRAPE_SECONDS"])},
    }
if FLEETDECK["ALERTMANAGER_URL"]:
    # Every INFERENCE_PENDING_CHECK_SECONDS (60 s): online inference waiting too long, to Alertmanager.
    CELERY_BEAT_SCHEDULE["prometheus_inference_pending_alerts"] = {
        "task": "prometheus.inference_pending_alerts",
        "schedule": float(FLEETDECK["INFERENCE_PENDING_CHECK_SECONDS"]),
        "options": {"expires": float(FLEETDECK["INFERENCE_PENDING_CHECK_SECONDS"])},
    }
CELERY_BEAT_SCHEDULE["health_nodes_mark_stale"] = {"task": "health.nodes_mark_stale", "schedule": 30.0}
CELERY_BEAT_SCHEDULE["health_workloads_watchdog"] = {"task": "health.workloads_watchdog", "schedule": 300.0}
CELERY_BEAT_SCHEDULE["health_readings_prune"] = {"task": "health.readings_prune", "schedule": 3600.0}
CELERY_BEAT_SCHEDULE["submission_keys_prune"] = {"task": "scheduling.submission_keys_prune", "schedule": 3600.0}
# Hourly: the inventory's version is its newest change row (fleet.inventory); the older ones go.
CELERY_BEAT_SCHEDULE["inventory_changes_prune"] = {"task": "fleet.inventory_changes_prune", "schedule": 3600.0}
# Likewise the policy's (scheduling.services.catalogue).
CELERY_BEAT_SCHEDULE["policy_changes_prune"] = {"task": "scheduling.policy_changes_prune", "schedule": 3600.0}
# Every minute: tell people whose team's workload has waited past their threshold; */5 min: queue
# again the notification deliveries the broker lost or a dead worker dropped.
CELERY_BEAT_SCHEDULE["notifications_waits_check"] = {"task": "notifications.waits_check", "schedule": 60.0,
                                                     "options": {"expires": 60.0}}
CELERY_BEAT_SCHEDULE["notifications_deliveries_sweep"] = {"task": "notifications.deliveries_sweep", "schedule": 300.0}
if FLEETDECK["DEMO_TELEMETRY"]:
    CELERY_BEAT_SCHEDULE["demo_telemetry"] = {
        "task": "demo.telemetry", "schedule": 15.0, "options": {"expires": 15.0}}
CELERY_BEAT_SCHEDULE["executor_tick"] = {
    "task": "scheduling.executor_tick",
    "schedule": float(FLEETDECK["PLACEMENT_ROUND_SECONDS"]),
    "options": {"expires": float(FLEETDECK["PLACEMENT_ROUND_SECONDS"])},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

