"""Made-up credentials in each provider's format (random, never real), with a host of their own."""

from __future__ import annotations

import secrets
import string

ALNUM = string.ascii_letters + string.digits
UPPER32 = string.ascii_uppercase + "234567"
HEX = "0123456789abcdef"


def rand(alphabet: str, n: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def provider_samples() -> dict[str, tuple[str, str]]:
    """pattern id -> (sample credential, a host where that credential belongs)."""
    return {
        "anthropic-api-key": ("sk-ant-api03-" + rand(ALNUM + "-_", 93) + "AA", "api.anthropic.com"),
        "openai-api-key": (
            "sk-proj-" + rand(ALNUM, 20) + "T3BlbkFJ" + rand(ALNUM, 20),
            "api.openai.com",
        ),
        "openrouter-api-key": ("sk-or-v1-" + rand(HEX, 64), "openrouter.ai"),
        "groq-api-key": ("gsk_" + rand(ALNUM, 52), "api.groq.com"),
        "aws-access-key-id": ("AKIA" + rand(UPPER32, 16), "sts.amazonaws.com"),
        "aws-secret-access-key": (
            "aws_secret_access_key = " + rand(ALNUM + "/+", 40),
            "s3.us-east-1.amazonaws.com",
        ),
        "aws-secret-access-key-env": (
            "AWS_SECRET_ACCESS_KEY=" + rand(ALNUM + "/+", 40),
            "sts.amazonaws.com",
        ),
        "aws-secret-access-key-json": (
            '"SecretAccessKey": "' + rand(ALNUM + "/+", 40) + '"',
            "sts.amazonaws.com",
        ),
        "github-token": ("ghp_" + rand(ALNUM, 36), "api.github.com"),
        "github-fine-grained-pat": (
            "github_pat_11" + rand(ALNUM, 20) + "_" + rand(ALNUM, 59),
            "github.com",
        ),
        "gitlab-token": ("glpat-" + rand(ALNUM + "-_", 20), "gitlab.com"),
        "google-api-key": ("AIzaSy" + rand(ALNUM + "-_", 33), "generativelanguage.googleapis.com"),
        "google-oauth-token": ("ya29." + rand(ALNUM + "-_", 60), "oauth2.googleapis.com"),
        "slack-token": ("xoxb-" + rand("0123456789", 12) + "-" + rand(ALNUM, 24), "slack.com"),
        "slack-webhook": (
            "https://hooks.slack.com/services/T"
            + rand(UPPER32, 8)
            + "/B"
            + rand(UPPER32, 8)
            + "/"
            + rand(ALNUM, 24),
            "hooks.slack.com",
        ),
        "stripe-key": ("sk_live_" + rand(ALNUM, 24), "api.stripe.com"),
        "huggingface-token": ("hf_" + rand(ALNUM, 34), "huggingface.co"),
        "npm-token": ("npm_" + rand(ALNUM, 36), "registry.npmjs.org"),
        "pypi-token": ("pypi-AgEIcHlwaS5vcmc" + rand(ALNUM + "-_", 60), "upload.pypi.org"),
        "sendgrid-api-key": ("SG." + rand(ALNUM, 22) + "." + rand(ALNUM, 43), "api.sendgrid.com"),
        "digitalocean-token": ("dop_v1_" + rand(HEX, 64), "api.digitalocean.com"),
        "shopify-token": ("shpat_" + rand(HEX, 32), "shop.myshopify.com"),
        "databricks-token": ("dapi" + rand(HEX, 32), "x.cloud.databricks.com"),
        "azure-storage-key": (
            "AccountKey=" + rand(ALNUM + "+/", 86) + "==",
            "acct.blob.core.windows.net",
        ),
        "private-key": ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow" + rand(ALNUM, 58), ""),
    }


def jwt() -> str:
    return "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0." + rand(ALNUM + "-_", 43)
