"""The two ways out: e-mail over the configured SMTP server, and a webhook POST.

Each raises Transient for what a later attempt may get through (a timeout, a refused
connection, a 5xx or 429, an SMTP server that is down) and Permanent for what no retry fixes
(a 4xx, a person without an e-mail address)."""
from __future__ import annotations

import smtplib
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core.mail import EmailMessage

from .choices import WebhookFormat


class Transient(Exception):
    pass


class Permanent(Exception):
    pass


def email_send(*, to: str, subject: str, text: str, url: str) -> None:
    if not to:
        raise Permanent("the account has no e-mail address")
    body = f"{text}\n\n{url}\n" if url else f"{text}\n"
    try:
        EmailMessage(subject=f"[Fleetdeck] {subject}", body=body, to=[to]).send()
    except smtplib.SMTPRecipientsRefused as exc:
        raise Permanent(f"the mail server refused {to}: {exc.recipients}") from exc
    except (smtplib.SMTPException, OSError) as exc:
        raise Transient(f"mail server: {exc}") from exc


def webhook_body(*, fmt: str, event: str, event_key: str, subject: str, text: str, url: str, data: dict) -> dict:
    if fmt == WebhookFormat.SLACK:
        link = f"\n<{url}|Open in Fleetdeck>" if url else ""
        return {"text": f"*{subject}*\n{text}{link}"}
    return {"event": event, "id": event_key, "subject": subject, "text": text, "url": url, "data": data}


def webhook_host_refusal(url: str) -> str:
    """Why a webhook URL may not be posted to ("" when it may): its host must match
    NOTIFICATIONS_WEBHOOK_ALLOWED_HOSTS when that list is set."""
    allowed = settings.NOTIFICATIONS["WEBHOOK_ALLOWED_HOSTS"]
    if not allowed:
        return ""
    host = (urlsplit(url).hostname or "").lower()
    for pattern in allowed:
        if host == pattern or (pattern.startswith("*.") and host.endswith(pattern[1:])):
            return ""
    return (f"webhooks may only go to {', '.join(allowed)} (NOTIFICATIONS_WEBHOOK_ALLOWED_HOSTS), "
            f"not {host or 'no host'}")


def webhook_send(*, target: str, body: dict) -> None:
    # Checked again at send time: the list may have been narrowed after the URL was saved.
    refusal = webhook_host_refusal(target)
    if refusal:
        raise Permanent(refusal)
    timeout = settings.NOTIFICATIONS["WEBHOOK_TIMEOUT_SECONDS"]
    try:
        response = httpx.post(target, json=body, timeout=timeout, follow_redirects=False,
                              headers={"User-Agent": "Fleetdeck notifications"})
    except httpx.TimeoutException as exc:
        raise Transient(f"no answer within {timeout:g} s") from exc
    except httpx.HTTPError as exc:
        raise Transient(f"could not reach the webhook: {exc}") from exc
    if response.status_code >= 500 or response.status_code == 429:
        raise Transient(f"the webhook answered HTTP {response.status_code}")
    if response.status_code >= 300:
        raise Permanent(f"the webhook answered HTTP {response.status_code}: {response.text[:200]}")
