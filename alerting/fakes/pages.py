"""The HTML pages of the local Slack and Jira: what a person opens to see what the alerting
service sent. Pure: each function takes what the server recorded and returns a page.

Slack: a channel view (channels in a sidebar, each thread a card: the parent as it reads
now, its earlier versions under "edited", the replies with their chart images, the
resolution marked). Permalinks (``/archives/<channel>/p<ts>``) open the channel with that
thread highlighted. Jira: a ticket list with filters (open/resolved, doc type) and a ticket
view (description, comments, status history) at ``/browse/<KEY>``, as on a real Jira.

Everything shown was sent by a client, so every string is HTML-escaped before any markup
is added around it.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, urlencode

_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:0;color:#1d1c1d}"
    "header{background:#3f0e40;color:#fff;padding:.6em 1.2em;font-weight:600}"
    "header.jira{background:#0747a6}"
    "main{display:flex}nav{width:14em;background:#f4ede4;padding:1em;min-height:90vh}"
    "nav a{display:block;color:#1d1c1d;text-decoration:none;padding:.2em .4em}"
    "nav a.on{background:#1164a3;color:#fff;border-radius:4px}"
    "section{flex:1;padding:1em 1.5em;max-width:60em}"
    ".thread{border:1px solid #ddd;border-radius:6px;margin:0 0 1.2em;padding:.6em 1em}"
    ".thread.focus{border:2px solid #1164a3;background:#f5f9ff}"
    ".msg{padding:.3em 0;white-space:pre-wrap}.meta{color:#616061;font-size:.8em}"
    ".replies{margin-left:1.5em;border-left:3px solid #e0e0e0;padding-left:1em}"
    ".reply.resolution{background:#eaf7ee;border-radius:4px;padding:.3em .5em}"
    ".state{font-weight:600;font-size:.75em;padding:.1em .5em;border-radius:3px}"
    ".state.open{background:#fde8e8;color:#b00}.state.resolved{background:#e3f4e8;color:#176b2c}"
    "details.edits{color:#616061;font-size:.85em}img.chart{max-width:100%;border:1px solid #ddd}"
    "code{background:#f1f1f1;padding:0 .2em;border-radius:3px}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}"
    "form.filters{margin:.5em 0 1em}form.filters *{margin-right:.6em}"
    ".desc{background:#fafbfc;border:1px solid #dfe1e6;padding:.5em 1em;border-radius:4px}"
    ".comment{border-top:1px solid #eee;padding:.5em 0}"
    ".actions{margin:.4em 0}.actions button{margin-right:.5em;padding:.3em .8em;cursor:pointer;"
    "border:1px solid #bbb;border-radius:4px;background:#fff}"
    ".actions button.primary{background:#007a5a;color:#fff;border-color:#007a5a}"
    ".click-result{color:#616061;font-size:.85em}"
)

#: Clicking a button: the local Slack sends it on, signed (``slack_interactions.py``); the
#: answer is shown, and the page reloads to show what the app did.
_CLICK_SCRIPT = (
    "<script>function awClick(b){const r=b.closest('.thread').querySelector('.click-result');"
    "fetch('/_local/click',{method:'POST',headers:{'Content-Type':'application/json'},"
    "body:JSON.stringify({channel:b.dataset.channel,ts:b.dataset.ts,action_id:b.dataset.action})"
    "}).then(x=>x.json()).then(j=>{const a=j.answer||{};r.textContent=(a.text||a.error||j.error"
    "||'')+' ('+(j.status||'refused')+')';setTimeout(()=>location.reload(),1500);});}</script>"
)


def _page(title: str, header: str, body: str, *, jira: bool = False) -> str:
    klass = " class='jira'" if jira else ""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><header{klass}>{html.escape(header)}</header>"
        f"{body}</body></html>"
    )


# --------------------------------------------------------------------------- Slack

_LINK = re.compile(r"<(https?://[^|>\s]+)(?:\|([^>]*))?>")
_MENTION = re.compile(r"<@([UW][A-Z0-9]+)>")


def _inline(text: str) -> str:
    """Escaped text with Slack's `code` and *bold* marks rendered."""
    out = html.escape(text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    out = re.sub(r"`([^`\n]+)`", r"<code>\1</code>", out)
    return re.sub(r"(?<![\w*])\*([^*\n]+)\*(?![\w*])", r"<b>\1</b>", out)


def mrkdwn(text: str) -> str:
    """Slack mrkdwn as HTML: links (<url|text>), user mentions (<@U123> as @U123), code,
    bold; everything else escaped."""
    text = _MENTION.sub(r"@\1", text)
    parts, last = [], 0
    for m in _LINK.finditer(text):
        parts.append(_inline(text[last : m.start()]))
        url, label = m.group(1), m.group(2) or m.group(1)
        parts.append(f"<a href='{html.escape(url, quote=True)}'>{_inline(label)}</a>")
        last = m.end()
    parts.append(_inline(text[last:]))
    return "".join(parts)


def _block_texts(blocks: Sequence[Any]) -> list[str]:
    texts = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if isinstance(block.get("text"), dict):
            texts.append(str(block["text"].get("text", "")))
        fields = [str(f.get("text", "")) for f in block.get("fields", []) if isinstance(f, dict)]
        if fields:
            texts.append("\n".join(fields))
        if block.get("type") == "actions":
            continue  # buttons: drawn by _buttons_html
        elements = block.get("elements", [])
        texts += [str(e.get("text", "")) for e in elements if isinstance(e, dict) and "text" in e]
    return texts


def _buttons_html(m: dict[str, Any], live: bool) -> str:
    """The buttons of a message's actions blocks (``live``: clicks are sent on)."""
    out = []
    for block in m.get("blocks") or []:
        if not isinstance(block, dict) or block.get("type") != "actions":
            continue
        for e in block.get("elements") or []:
            if not isinstance(e, dict) or e.get("type") != "button":
                continue
            text = e.get("text")
            label = str(text.get("text", "")) if isinstance(text, dict) else str(text or "")
            attrs = " ".join(
                f"data-{k}='{html.escape(str(v), quote=True)}'"
                for k, v in (("action", e.get("action_id")), ("channel", m.get("channel")),
                             ("ts", m.get("ts")))
            )  # fmt: skip
            klass = f"button {html.escape(str(e.get('style') or ''), quote=True)}".strip()
            click = " onclick='awClick(this)'" if live else " disabled"
            out.append(f"<button class='{klass}' {attrs}{click}>{html.escape(label)}</button>")
    if not out:
        return ""
    return f"<div class='actions'>{''.join(out)}<span class='click-result'></span></div>"


def _message_html(m: dict[str, Any], live: bool = False) -> str:
    texts = _block_texts(m.get("blocks") or []) or [str(m.get("text") or "")]
    shown = "".join(f"<div class='msg'>{mrkdwn(t)}</div>" for t in texts if t)
    return shown + _buttons_html(m, live)


def _when(ts: str) -> str:
    try:
        seconds = float(ts)
    except ValueError:
        return ts
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def slack_page(
    messages: list[dict[str, Any]],
    channel_names: dict[str, str],
    *,
    channel: str | None = None,
    focus_ts: str | None = None,
    buttons: bool = False,
) -> str:
    """The channel view: threads of ``channel`` (default: the first with messages);
    ``buttons``: the parents' buttons send their clicks on (else they are drawn disabled)."""
    channels = list(dict.fromkeys(m["channel"] for m in messages))
    channel = channel if channel in channels else (channels[0] if channels else None)
    nav = "".join(
        f"<a class='{'on' if c == channel else ''}' href='/archives/{quote(c)}'>"
        f"# {html.escape(channel_names.get(c, c).lstrip('#'))}</a>"
        for c in channels
    )
    if channel is None:
        body = "<section><p class='empty'>No messages yet.</p></section>"
        return _page("local Slack", "local Slack", f"<main><nav>{nav}</nav>{body}</main>")
    mine = [m for m in messages if m["channel"] == channel]
    replies: dict[str, list[dict[str, Any]]] = {}
    for m in mine:
        if m.get("thread_ts"):
            replies.setdefault(str(m["thread_ts"]), []).append(m)
    threads = []
    for parent in (m for m in mine if not m.get("thread_ts")):
        ts = str(parent["ts"])
        kids = replies.get(ts, [])
        resolved = any(str(k.get("text", "")).startswith("Resolved") for k in kids)
        state = "resolved" if resolved else "open"
        edits = parent.get("edits") or []
        earlier = "".join(f"<div class='earlier'>{_message_html(e)}</div>" for e in reversed(edits))
        edited = (
            f"<details class='edits'><summary class='edited'>edited {len(edits)}x: earlier "
            f"versions</summary>{earlier}</details>"
            if edits
            else ""
        )
        items = []
        for k in kids:
            klass = "reply"
            if str(k.get("text", "")).startswith("Resolved"):
                klass += " resolution"
            images = "".join(
                f"<div><img class='chart' alt='drift chart' src='/_local/files/{quote(f)}'></div>"
                for f in k.get("files", [])
            )
            items.append(
                f"<div class='{klass}' data-ts='{html.escape(str(k['ts']))}'>"
                f"<div class='meta'>anchorwatch · {_when(str(k['ts']))}</div>"
                f"{_message_html(k) if k.get('text') or k.get('blocks') else ''}{images}</div>"
            )
        focus = " focus" if ts == focus_ts else ""
        threads.append(
            f"<article class='thread{focus}' id='p{html.escape(ts.replace('.', ''))}' "
            f"data-ts='{html.escape(ts)}'><div class='parent'><div class='meta'>anchorwatch · "
            f"{_when(ts)} <span class='state {state}'>{state}</span> · {len(kids)} "
            f"{'reply' if len(kids) == 1 else 'replies'}</div>"
            f"{_message_html(parent, buttons)}{edited}"
            f"</div><div class='replies'>{''.join(items)}</div></article>"
        )
    name = channel_names.get(channel, channel)
    body = f"<section><h2># {html.escape(name.lstrip('#'))}</h2>{''.join(threads)}</section>"
    script = _CLICK_SCRIPT if buttons else ""
    return _page(f"#{name.lstrip('#')} · local Slack", "local Slack",
                 f"<main><nav>{nav}</nav>{body}</main>{script}")  # fmt: skip


# --------------------------------------------------------------------------- Jira

_ENTITY = {"&#92;": "\\", "&#58;": ":"}


def _wiki_inline(text: str) -> str:
    # Backslash escapes first: a character reference stands for a literal, never an escape.
    text = re.sub(r"\\(.)", lambda m: "\x00" + str(ord(m.group(1))) + "\x01", text)
    for ref, char in _ENTITY.items():
        text = text.replace(ref, "\x00" + str(ord(char)) + "\x01")
    out = html.escape(text)
    out = re.sub(r"(?<![\w*])\*([^*\n]+)\*(?![\w*])", r"<b>\1</b>", out)
    out = re.sub(r"(?<![\w])_([^_\n]+)_(?![\w])", r"<i>\1</i>", out)
    out = re.sub(
        r"\[([^|\]\n]+)\|(https?://[^\]\s]+)\]",
        lambda m: f"<a href='{m.group(2)}'>{m.group(1)}</a>",
        out,
    )
    return re.sub("\x00(\\d+)\x01", lambda m: html.escape(chr(int(m.group(1)))), out)


def wiki(text: str) -> str:
    """Jira wiki markup as HTML: headings, tables, bullets, bold, links, escapes."""
    out: list[str] = []
    table: list[str] = []
    bullets: list[str] = []

    def flush() -> None:
        if table:
            out.append("<table>" + "".join(table) + "</table>")
            table.clear()
        if bullets:
            out.append("<ul>" + "".join(bullets) + "</ul>")
            bullets.clear()

    for line in text.splitlines():
        if line.startswith("||"):
            cells = [c for c in line.strip("|").split("||")]
            table.append("<tr>" + "".join(f"<th>{_wiki_inline(c)}</th>" for c in cells) + "</tr>")
            continue
        if line.startswith("|"):
            cells = line.strip().strip("|").split("|")
            table.append("<tr>" + "".join(f"<td>{_wiki_inline(c)}</td>" for c in cells) + "</tr>")
            continue
        if line.startswith("* "):
            bullets.append(f"<li>{_wiki_inline(line[2:])}</li>")
            continue
        flush()
        heading = re.match(r"h([1-6])\. (.*)", line)
        if heading:
            level = heading.group(1)
            out.append(f"<h{level}>{_wiki_inline(heading.group(2))}</h{level}>")
        elif line.strip():
            out.append(f"<p>{_wiki_inline(line)}</p>")
    flush()
    return "".join(out)


def _doc_label(labels: Sequence[str]) -> str | None:
    return next((lab for lab in labels if lab.startswith("doc-")), None)


def _readable(label: str) -> str:
    """`doc-<prefix>-<16 hex>`: the prefix, for people."""
    return re.sub(r"-[0-9a-f]{16}$", "", label[len("doc-") :])


def jira_list_page(issues: list[dict[str, Any]], query: dict[str, list[str]]) -> str:
    """The ticket list, filtered by ``status`` (open, resolved, all) and ``doc`` (a doc
    label)."""
    status = (query.get("status") or ["all"])[-1]
    doc = (query.get("doc") or [""])[-1]
    docs = sorted({d for i in issues if (d := _doc_label(i["labels"]))})

    def keep(i: dict[str, Any]) -> bool:
        done = i["status"] == "Done"
        if (status == "open" and done) or (status == "resolved" and not done):
            return False
        return not doc or doc in i["labels"]

    shown = [i for i in issues if keep(i)]
    options = "".join(
        f"<option value='{html.escape(v, quote=True)}'{' selected' if v == status else ''}>"
        f"{html.escape(t)}</option>"
        for v, t in (("all", "all"), ("open", "open"), ("resolved", "resolved"))
    )
    doc_options = "<option value=''>any doc type</option>" + "".join(
        f"<option value='{html.escape(d, quote=True)}'{' selected' if d == doc else ''}>"
        f"{html.escape(_readable(d))}</option>"
        for d in docs
    )
    form = (
        "<form class='filters' method='get' action='/'>"
        f"<label>Status <select name='status'>{options}</select></label>"
        f"<label>Doc type <select name='doc'>{doc_options}</select></label>"
        "<button type='submit'>Filter</button></form>"
    )
    rows = "".join(
        f"<tr class='ticket' data-key='{html.escape(i['key'])}'>"
        f"<td><a href='/browse/{quote(i['key'])}'>{html.escape(i['key'])}</a></td>"
        f"<td>{html.escape(i['summary'])}</td>"
        f"<td>{html.escape(_readable(_doc_label(i['labels']) or 'doc-?'))}</td>"
        f"<td class='status'>{html.escape(i['status'])}</td><td>{html.escape(i['priority'])}</td>"
        f"<td>{len(i['comments'])}</td><td>{html.escape(i['created'])}</td></tr>"
        for i in shown
    )
    table = (
        "<table class='tickets'><tr><th>Key</th><th>Summary</th><th>Doc type</th>"
        f"<th>Status</th><th>Priority</th><th>Comments</th><th>Created</th></tr>{rows}</table>"
        if shown
        else "<p class='empty'>No tickets match.</p>"
    )
    query_text = urlencode({"status": status, "doc": doc})
    body = (
        f"<section><h2>Drift tickets ({len(shown)} of {len(issues)})</h2>{form}{table}"
        f"<p class='meta'>filter: {html.escape(query_text)}</p></section>"
    )
    return _page("local Jira", "local Jira", body, jira=True)


def jira_issue_page(issue: dict[str, Any]) -> str:
    comments = "".join(
        f"<div class='comment'><div class='meta'>{html.escape(c['author'])} · "
        f"{html.escape(c['created'])}</div>{wiki(c['body'])}</div>"
        for c in issue["comments"]
    )
    history = "".join(
        f"<tr><td>{html.escape(h['at'])}</td><td>{html.escape(h['transition'])}</td>"
        f"<td>{html.escape(h['from'])} → {html.escape(h['to'])}</td></tr>"
        for h in issue["history"]
    )
    body = (
        "<section><p><a href='/'>← all tickets</a></p>"
        f"<h2><span class='key'>{html.escape(issue['key'])}</span> "
        f"<span class='summary'>{html.escape(issue['summary'])}</span></h2>"
        f"<p class='meta'>Status <b class='status'>{html.escape(issue['status'])}</b> · "
        f"priority {html.escape(issue['priority'])} · labels "
        f"{html.escape(', '.join(issue['labels']))} · created {html.escape(issue['created'])}"
        f"{_people(issue)}</p><h3>Description</h3>"
        f"<div class='desc'>{wiki(issue['description'] or '')}</div>"
        f"<h3>Comments ({len(issue['comments'])})</h3><div class='comments'>{comments}</div>"
        "<h3>Status history</h3><table class='history'><tr><th>When</th><th>Transition</th>"
        f"<th>Status</th></tr><tr><td>{html.escape(issue['created'])}</td><td>created</td>"
        f"<td>To Do</td></tr>{history}</table></section>"
    )
    return _page(f"{issue['key']} · local Jira", "local Jira", body, jira=True)


def _people(issue: dict[str, Any]) -> str:
    """Components and assignee, when the ticket has them."""
    out = ""
    if components := issue.get("components"):
        out += f" · component <span class='components'>{html.escape(', '.join(components))}</span>"
    if assignee := issue.get("assignee"):
        out += f" · assignee <b class='assignee'>{html.escape(assignee)}</b>"
    return out


def jira_not_found(key: str) -> str:
    return _page("local Jira", "local Jira",
                 f"<section><p>No ticket {html.escape(key)}.</p></section>", jira=True)  # fmt: skip
