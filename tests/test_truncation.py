"""Tool output truncation (OpenCode's ``Truncate.output`` and ``test/tool/truncation.test.ts``)."""

from __future__ import annotations

from jupyter_session_agent.tools.truncation import MAX_BYTES, MAX_LINES, truncate


def saved(data_dir):
    folder = data_dir / "tool-output"
    return sorted(folder.iterdir()) if folder.exists() else []


def test_defaults_are_opencode_constants():
    assert MAX_LINES == 2000
    assert MAX_BYTES == 51_200


def test_fitting_output_is_unchanged_and_not_saved(tmp_path):
    text = "\n".join(f"line {i}" for i in range(MAX_LINES))  # exactly 2000 lines
    result = truncate(text, tmp_path)
    assert result.content == text and not result.truncated and result.output_path is None
    assert saved(tmp_path) == []


def test_truncates_by_lines_from_the_head(tmp_path):
    text = "\n".join(f"line {i}" for i in range(3000))
    result = truncate(text, tmp_path)
    assert result.truncated
    head, rest = result.content.split("\n\n...", 1)
    assert head.split("\n") == [f"line {i}" for i in range(2000)]
    assert rest.startswith("1000 lines truncated...\n\n")
    assert f"Full output saved to: {result.output_path}" in result.content
    assert "Use grep to search the full content or read with offset/limit" in result.content
    files = saved(tmp_path)
    assert len(files) == 1 and str(files[0]) == result.output_path
    assert files[0].name.startswith("tool_")
    assert files[0].read_text(encoding="utf-8") == text


def test_truncates_by_bytes(tmp_path):
    line = "x" * 99
    text = "\n".join([line] * 1000)  # 1000 lines, 99_999 bytes
    result = truncate(text, tmp_path)
    kept = result.content.split("\n\n...", 1)[0]
    kept_bytes = len(kept.encode())
    assert kept_bytes <= MAX_BYTES
    assert len(kept.split("\n")) == 512  # 512 * 100 - 1 = 51_199 bytes
    assert f"...{len(text) - kept_bytes} bytes truncated..." in result.content


def test_single_huge_line_reports_bytes(tmp_path):
    text = "y" * (MAX_BYTES + 10_000)
    result = truncate(text, tmp_path)
    assert result.truncated
    assert result.content.startswith("\n\n...")  # nothing of the line fits
    assert f"...{len(text)} bytes truncated..." in result.content


def test_multibyte_characters_count_as_utf8_bytes(tmp_path):
    text = "é" * 30_000  # 60_000 bytes in 30_000 characters
    result = truncate(text, tmp_path)
    assert result.truncated and "bytes truncated" in result.content


def test_tail_keeps_the_end_and_puts_the_marker_first(tmp_path):
    text = "\n".join(f"line {i}" for i in range(2500))
    result = truncate(text, tmp_path, direction="tail")
    assert result.content.startswith("...500 lines truncated...\n\nThe tool call succeeded")
    tail = result.content.rsplit("\n\n", 1)[1]
    assert tail.split("\n") == [f"line {i}" for i in range(500, 2500)]


def test_custom_limits_and_one_file_per_truncation(tmp_path):
    truncate("a\nb\nc", tmp_path, max_lines=5)
    assert saved(tmp_path) == []
    first = truncate("a\nb\nc", tmp_path, max_lines=2)
    second = truncate("abcdef", tmp_path, max_bytes=3)
    assert first.content.startswith("a\nb\n\n...1 lines truncated...")
    assert second.content.startswith("\n\n...6 bytes truncated...")  # one line, too long
    assert len(saved(tmp_path)) == 2
    assert first.output_path < second.output_path  # ascending ids sort in creation order
