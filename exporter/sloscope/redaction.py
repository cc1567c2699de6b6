"""Credentials written into URLs (``http://user:password@host``) kept out of logs and labels.

sloscope's own credentials come only from files (:class:`sloscope.config.HTTPClientConfig`), but a
configured URL may still carry userinfo, which httpx sends as basic authentication. Wherever a URL
becomes a label value it goes through :func:`redact_url` (or is replaced by a configured ``name``; a
target's address used as its pod name loses its userinfo: :func:`without_userinfo`); every log line goes through
:class:`RedactingFilter` (installed on the handlers by ``serve``), so a URL logged by any module, httpx's
included, shows ``xxxxx@`` in place of its userinfo. The user name is masked too: a token is often
passed as one.
"""

from __future__ import annotations

import logging
import re

__all__ = ["MASK", "RedactingFilter", "redact_text", "redact_url", "without_userinfo"]

MASK = "xxxxx"
# scheme://userinfo@ : userinfo stops at the first "/", "?", "#", "@" or whitespace.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]+@")


def redact_text(text: str) -> str:
    """``text`` with the userinfo of every URL in it replaced by ``xxxxx``."""
    return _USERINFO.sub(rf"\g<scheme>{MASK}@", text)


def redact_url(url: str) -> str:
    """The URL with its userinfo, if any, replaced by ``xxxxx`` (``http://xxxxx@host:8000``)."""
    return redact_text(url)


def without_userinfo(address: str) -> str:
    """A target's ``host:port`` without the ``user:password@`` it may be written with.

    A static or file_sd target's address becomes the URL scraped (``http://<address>/metrics``, so
    userinfo in it is sent as basic authentication) and, when no pod name is given, the ``pod`` label:
    the label is the address without it, which is also what spans name as the endpoint.
    """
    return address.rpartition("@")[2]


class RedactingFilter(logging.Filter):
    """Rewrites a record's message (arguments merged in) and its exception text without URL userinfo."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        return True
