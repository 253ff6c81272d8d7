"""Django settings for FreeLLM, read from the environment (django-environ).

Every knob an operator may turn is an environment variable listed in the README; nothing here
needs editing to deploy. The defaults are the embedded ones: SQLite under var/, in-process
memory for caches and the channel layer, DEBUG off.
"""

from __future__ import annotations

import os
from pathlib import Path

import environ

from freellm_site import keyfiles

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

VAR_DIR = Path(env.str("FREELLM_VAR_DIR", default=str(BASE_DIR / "var")))

try:
    FREELLM_SECRET_KEY: bytes = keyfiles.encryption_key(VAR_DIR, os.environ.get("FREELLM_SECRET_KEY"))
    SECRET_KEY = keyfiles.django_secret(VAR_DIR, os.environ.get("DJANGO_SECRET_KEY"))
except keyfiles.SecretConfigError as exc:
    keyfiles.fail_startup(str(exc))

DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# The run command's address (manage.py serve / make run).
HOST = env.str("HOST", default="127.0.0.1")
PORT = env.int("PORT", default=8000)
FREELLM_CONFIG = env.str("FREELLM_CONFIG", default="")
REDIS_URL = env.str("REDIS_URL", default="")
# `on_model_switch`: tell a model taking over a conversation so (gateway/pipeline/sticky.py).
FREELLM_CONTEXT_HANDOFF = env.str("FREELLM_CONTEXT_HANDOFF", default="")

INSTALLED_APPS = [
    # daphne first: it provides `manage.py runserver` as an ASGI server.
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "channels",
    "gateway",
    "dashboard",
]
# The data plane (/v1, /v1beta) never reaches Django's handler or this middleware (see
# gateway/http.py), so these run only for the admin, the dashboard and static files. Every one
# is async-capable; ServeStatic comes first and is natively async, so static files are served
# without a thread hop.
MIDDLEWARE = [
    "servestatic.middleware.ServeStaticMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "freellm_site.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

ASGI_APPLICATION = "freellm_site.asgi.application"

DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'freellm.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the request-log writer and readers work at once; IMMEDIATE avoids lock upgrades.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "init_command": "PRAGMA journal_mode=WAL;PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        }
    )
    # Tests use a file too: an in-memory database shares one cache between connections and
    # answers "table is locked" to a reader while the request-log thread writes, where WAL
    # (production's journal) lets readers and the writer work at once.
    # One file per test process, so two runs side by side (a developer's and CI's) never share it.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# Static files are served by ServeStatic straight from the apps' folders, so the admin has its
# styles with DEBUG off and no collectstatic step is needed.
SERVESTATIC_USE_FINDERS = True
SERVESTATIC_AUTOREFRESH = DEBUG

REST_FRAMEWORK = {
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"],
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # Upstream calls are logged by the gateway itself, without the URLs httpx would print.
    "loggers": {"httpx": {"level": "WARNING"}, "httpcore": {"level": "WARNING"}},
}
