"""A campaign: the Hypothesis search over cases under one config, triage of known findings, replay of a
saved failure, and what a person reads afterwards (text and JSON reports, pictures, live progress)."""

from fuzz.lazy import face

__all__, __getattr__, __dir__ = face(__name__, {
    ".search": ("CampaignResult", "CampaignOptions", "CampaignRunner"),
    ".triage": ("run_triaged",),
    ".replay": ("ReplayResult",),
    ".report": ("campaign_text", "campaign_json", "replay_text", "replay_json", "failure_lines"),
    ".progress": ("LiveProgress", "chain"),
    ".database": ("open_database", "check_url", "is_redis", "require_redis"),
    ".repeat": ("Repeat",),
    ".reduce": ("reduce_failure", "size_text"),
})
