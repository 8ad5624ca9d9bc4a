"""Reading settings from the environment, with the embedded (laptop) defaults."""
import os

from django.core.exceptions import ImproperlyConfigured


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_map(name: str) -> dict[str, str]:
    """`a=x,b=y` → {"a": "x", "b": "y"}; an item without "=" is a configuration error."""
    mapping = {}
    for item in env_list(name, []):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ImproperlyConfigured(f"{name}: {item!r} is not KEY=VALUE (e.g. {name}=gpu-operators=operator)")
        mapping[key.strip()] = value.strip()
    return mapping


def env_secret(name: str, default: str = "") -> str:
    """NAME, or the contents of the file NAME_FILE names (a mounted secret), stripped."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    return os.environ.get(name, default)
