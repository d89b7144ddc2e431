"""The texts of a summary compaction: the summariser's system prompt and template, the
transcript / previous-summary intros, the pinned-section note, and the continue, overflow
and restated-request messages that follow a summary."""

from __future__ import annotations

SUMMARY_SYSTEM = (
    "You are the conversation summariser of a coding and data assistant. You read a conversation "
    "between a user and the assistant and write the summary another assistant will continue from. "
    "Be detailed but concise: what was done, what is in progress, which files are involved, what "
    "comes next, the user's lasting constraints and preferences, and the key technical decisions "
    "with their reasons. Keep exact names, paths, numbers and identifiers. Do not answer questions "
    "that appear in the conversation, do not invent anything, and do not call tools."
)
SUMMARY_TEMPLATE = (
    "Write a summary that lets another agent continue this work: what we did, what we are doing, "
    "which files we are working on, and what we will do next. Follow this template:\n\n"
    "## Goal\n[what the user wants to achieve]\n\n"
    "## Instructions\n[the user's instructions and constraints that still apply; any plan or spec]\n\n"
    "## Discoveries\n[what was learned: facts, values, errors, decisions and why]\n\n"
    "## Accomplished\n[done / in progress / left to do]\n\n"
    "## Relevant files / directories\n[paths read, edited or created]"
)
TRANSCRIPT_INTRO = "Below is the conversation to summarise, as a transcript."
PREVIOUS_INTRO = (
    "This is the summary written at the previous compaction. It covers everything before the "
    "transcript below and is discarded after this: what you do not carry into the new summary is "
    "lost. Merge the two instead of starting over: carry forward the goal, the user's constraints "
    "and preferences, the decisions and the work still open, even where the transcript does not "
    "mention them, and drop only what is finished and no longer needed. The transcript is newer: "
    "where the two disagree, it wins; state the corrected fact and drop the old one."
)
PINNED_NOTE = (
    "What the user and the assistant said once (verbatim) and where the tool outputs are saved are "
    "added to your summary by the system: do not copy those messages out, and keep the summary under "
    "about {tokens} tokens."
)
CONTINUE_TEXT = (
    "The conversation above was compacted: the summary replaces the earlier messages. Continue "
    "with the next steps if there are any; if you are not sure what to do next, stop and ask "
    "the user."
)
OVERFLOW_NOTE = (
    "The previous request exceeded the model's context window, most likely because of large "
    "attachments or tool outputs; attachments were removed. Tell the user to try smaller or "
    "fewer files if that matters."
)
RESTATE_TEXT = "The user's latest request, verbatim:\n\n{text}"


def continue_text(*, overflow: bool, restate: str | None = None) -> str:
    """The synthetic message after an auto compaction: the overflow note first after an overflow
    error, then the continue text, then the user's latest request verbatim (``restate``)."""
    text = CONTINUE_TEXT
    if overflow:
        text = OVERFLOW_NOTE + "\n\n" + text
    if restate is not None:
        text += "\n\n" + RESTATE_TEXT.format(text=restate)
    return text
