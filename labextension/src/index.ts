/**
 * A JupyterLab MIME renderer for jupyter-session-agent transcripts.
 *
 * It renders `application/vnd.jupyter.session-agent+json` (schema version 1):
 * `{version, view, live, session, messages: [{info, parts}], omitted, budget}`
 * where `info` and `parts` are OpenCode JSON (`WithParts.to_data()`), and
 * `budget` is the session's budget report. Everything is built with DOM calls
 * and `textContent`; only text parts go through Markdown, and then through
 * JupyterLab's sanitizer, so the renderer is safe for untrusted notebooks.
 */

import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { cellSource, handleRequest } from './notebook';

export const MIME_TYPE = 'application/vnd.jupyter.session-agent+json';
export const SCHEMA_VERSION = 1;

type Json = { [key: string]: any };

const PREVIEW_LINES = 12;
/** The usable line is drawn when it is at most this many times the tallest step. */
const USABLE_IN_CHART = 1.5;
/**
 * Icons are inline SVG (`currentColor`), never emoji or dingbats: those need a font that many
 * machines lack, and show as empty boxes there. Paths on a 16 x 16 grid.
 */
const ICONS: { [name: string]: string } = {
  pending: '<circle cx="8" cy="8" r="5.5"/><path d="M8 5v3.3l2.2 1.5"/>',
  running: '<circle cx="8" cy="8" r="5.5" opacity=".35"/><path d="M8 2.5a5.5 5.5 0 0 1 5.5 5.5"/>',
  completed: '<path d="M3.5 8.5l3 3 6-7"/>',
  error: '<path d="M4.5 4.5l7 7M11.5 4.5l-7 7"/>',
  failed: '<path d="M4.5 4.5l7 7M11.5 4.5l-7 7"/>',
  interrupted: '<rect x="4.5" y="4.5" width="7" height="7" rx="1" fill="currentColor" stroke="none"/>',
  retry: '<path d="M12.8 8.6A4.9 4.9 0 1 1 11.3 4.4"/><path d="M12.3 1.8v3.3H9"/>',
  pruned: '<circle cx="4.5" cy="11.5" r="2"/><circle cx="11.5" cy="11.5" r="2"/><path d="M5.7 9.8L11.5 2.5M10.3 9.8L4.5 2.5"/>',
  file: '<path d="M10.5 4.5l-5 5a1.8 1.8 0 0 0 2.5 2.5l5.5-5.5a3.2 3.2 0 0 0-4.5-4.5L3.5 7.5a4.6 4.6 0 0 0 6.5 6.5l4-4"/>'
};

/** An inline SVG icon (`ICONS`), sized to the text around it. */
export function icon(name: string): Element {
  // only a known icon's name reaches the markup: a status or type from the history never does
  name = Object.prototype.hasOwnProperty.call(ICONS, name) ? name : 'unknown';
  const template = document.createElement('template');
  template.innerHTML =
    `<svg class="jsa-icon jsa-icon-${name}" viewBox="0 0 16 16" width="12" height="12" aria-hidden="true" ` +
    `fill="none" stroke="currentColor" stroke-width="1.8" stroke-linecap="round" stroke-linejoin="round">` +
    `${ICONS[name] || ''}</svg>`;
  return template.content.firstElementChild as Element;
}

const URL_ATTRIBUTES = ['href', 'src', 'xlink:href', 'action', 'formaction', 'srcset', 'poster'];

/**
 * Removes every link or source whose scheme is not http(s), mailto or (for images) data:image
 * from Markdown a model wrote, after the sanitizer: an image or link to `javascript:` stays inert.
 */
export function dropScriptUrls(root: Element): void {
  for (const node of Array.from(root.querySelectorAll('*'))) {
    for (const name of URL_ATTRIBUTES) {
      const value = node.getAttribute(name);
      if (value === null) {
        continue;
      }
      const plain = value.replace(/[\u0000-\u0020\u007f-\u009f]/g, '').toLowerCase();
      const scheme = /^([a-z][a-z0-9+.-]*):/.exec(plain);
      const image = name === 'src' && plain.startsWith('data:image/');
      if (scheme && !['http', 'https', 'mailto'].includes(scheme[1]) && !image) {
        node.removeAttribute(name);
      }
    }
  }
}

/** `el('div', 'a b', 'text')` → `<div class="a b">text</div>`. */
function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className?: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function num(value: any): number {
  return typeof value === 'number' && isFinite(value) ? value : 0;
}

function fmt(value: any): string {
  return Math.round(num(value)).toLocaleString('en-US');
}

function short(value: any): string {
  const n = num(value);
  if (n >= 1_000_000) {
    return `${(n / 1_000_000).toFixed(n >= 10_000_000 ? 0 : 1)}M`;
  }
  if (n >= 1_000) {
    return `${(n / 1_000).toFixed(n >= 10_000 ? 0 : 1)}k`;
  }
  return `${Math.round(n)}`;
}

function usd(value: any): string {
  return `$${num(value).toFixed(4)}`;
}

function duration(ms: any): string {
  const s = Math.max(0, num(ms) / 1000);
  if (s < 60) {
    return `${s.toFixed(2)} s`;
  }
  if (s < 3600) {
    return `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
  }
  if (s < 86400) {
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  }
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

function clock(ms: any): string {
  const d = new Date(num(ms));
  return isNaN(d.getTime()) ? '' : d.toISOString().replace('T', ' ').slice(0, 16) + ' UTC';
}

function tokenCount(tokens: Json | undefined): number {
  if (!tokens) {
    return 0;
  }
  const cache = tokens.cache || {};
  return (
    num(tokens.total) ||
    num(tokens.input) + num(tokens.output) + num(cache.read) + num(cache.write)
  );
}

/**
 * pending / running / completed / error / interrupted (an error marked interrupted) /
 * failed (completed, but the code it ran raised: see `toolErrorClass`).
 */
export function toolStatus(part: Json): string {
  const state = part.state || {};
  if (state.status === 'error' && state.metadata && state.metadata.interrupted) {
    return 'interrupted';
  }
  if (toolErrorClass(part)) {
    return 'failed';
  }
  return state.status || 'pending';
}

/**
 * The exception class a completed call's code raised, or ''. The python tool completes such
 * a call (its prints matter) and records the class in `state.metadata.error`.
 */
export function toolErrorClass(part: Json): string {
  const state = part.state || {};
  const error = state.status === 'completed' && state.metadata ? state.metadata.error : undefined;
  return typeof error === 'string' ? error : '';
}

function badge(text: string, kind: string, iconName?: string): HTMLElement {
  const node = el('span', `jsa-badge jsa-badge-${kind}`);
  if (iconName) {
    node.appendChild(icon(iconName));
  }
  node.appendChild(document.createTextNode(text));
  return node;
}

/** A small part: a kind badge and a line of text. */
function labelled(kind: string, text: string): HTMLElement {
  const node = el('div', 'jsa-small');
  node.appendChild(badge(kind, 'kind'));
  node.appendChild(el('span', '', ` ${text}`));
  return node;
}

export class TranscriptWidget extends Widget implements IRenderMime.IRenderer {
  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this._mimeType = options.mimeType;
    this._sanitizer = options.sanitizer;
    this._markdown = options.markdownParser || null;
    this.addClass('jsa-transcript');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const data = model.data[this._mimeType] as Json;
    this._remember();
    this.node.textContent = '';
    if (!data || typeof data !== 'object') {
      this.node.appendChild(el('div', 'jsa-error', 'No session-agent data in this output.'));
      return;
    }
    if (num(data.version) > SCHEMA_VERSION) {
      this.node.appendChild(
        el('div', 'jsa-note', `Written by a newer jupyter-session-agent (schema ${data.version}); showing what this version understands.`)
      );
    }
    if (data.view === 'widget-fallback') {
      this._fallback(data.fallback || {});
      return;
    }
    this._tools = (data.tools && typeof data.tools === 'object' ? data.tools : {}) as Json;
    this._compact = data.detail === 'compact' && data.view !== 'budget';
    // the call a live turn waits on: its line says so, not "running"
    this._askingCall =
      data.live && data.asking && typeof data.asking === 'object' ? String(data.asking.call_id || '') : '';
    this._telemetry = [];
    this.node.classList.toggle('jsa-live', !!data.live);
    this.node.classList.toggle('jsa-compact', this._compact);
    this.node.appendChild(this._header(data));
    const pending: Promise<void>[] = [];
    if (data.view !== 'budget') {
      if (num(data.omitted) > 0 && !this._compact) {
        this.node.appendChild(el('div', 'jsa-note jsa-omitted', `… ${fmt(data.omitted)} earlier messages not shown`));
      }
      for (const message of data.messages || []) {
        this.node.appendChild(this._message(message, pending));
      }
      if (!(data.messages || []).length) {
        this.node.appendChild(el('div', 'jsa-note', data.live ? 'Waiting for the model…' : '(empty session)'));
      }
    }
    if (data.live && data.asking && typeof data.asking === 'object') {
      this.node.appendChild(this._approval(data.asking, pending));
    }
    if (data.live && data.frontend && typeof data.frontend === 'object') {
      // a notebook tool's request: done on the open notebook, answered on stdin (notebook.ts)
      handleRequest(this.node, data.frontend, said => this.node.appendChild(el('div', 'jsa-frontend jsa-note', said)));
    }
    await Promise.all(pending);
    if (this._compact) {
      if ((data.messages || []).length && (data.budget || this._telemetry.length)) {
        this.node.appendChild(this._footer(data));
      }
    } else if (data.budget) {
      this.node.appendChild(renderBudget(data.budget));
    }
    this._restore();
  }

  dispose(): void {
    this._stopClock();
    super.dispose();
  }

  // -- a widget's static fallback: hidden while the widget lives, in its place once gone --

  private _fallback(fallback: Json): void {
    this.addClass('jsa-fallback');
    const box = el('div', 'jsa-fallback-box');
    box.appendChild(el('div', 'jsa-title', String(fallback.title || 'Saved view')));
    box.appendChild(el('pre', 'jsa-fallback-text', String(fallback.text || '')));
    box.appendChild(el('div', 'jsa-note', String(fallback.note || '')));
    this.node.appendChild(box);
    // the widget is the output just before this one; JupyterLab says so when its model is gone
    let tries = 0;
    const check = () => {
      const child = this.node.closest('.jp-OutputArea-child');
      const widget = child ? child.previousElementSibling : null;
      const text = widget ? widget.textContent || '' : '';
      // gone: JupyterLab's "Error displaying widget" (a trusted notebook), or the widget's
      // text/plain drawn instead (an untrusted one: the widget renderer is not used)
      const output = widget ? widget.querySelector('.jp-OutputArea-output') : null;
      const plain = !!output && output.getAttribute('data-mime-type') === 'text/plain';
      const gone = !!widget && (plain || /Error displaying widget|model not found/.test(text));
      this.node.classList.toggle('jsa-fallback-shown', gone);
      if (widget) {
        widget.classList.toggle('jsa-widget-gone', gone);
      }
      const alive = !!widget && !!widget.querySelector('.jupyter-widgets:not(.jupyter-widgets-disconnected) .widget-box, .jsa-browser');
      if (!gone && !alive && tries++ < 40 && !this.isDisposed) {
        window.setTimeout(check, 500);
      }
    };
    window.setTimeout(check, 100);
  }

  // -- progress: elapsed time and what the turn waits for, ticking between updates ------

  private _progress(progress: Json): HTMLElement {
    const node = el('span', 'jsa-progress');
    const elapsed = num(progress.elapsed);
    const since = performance.now();
    const waiting = String(progress.waiting || 'model');
    const what =
      waiting === 'approval'
        ? 'waiting for your approval'
        : waiting === 'review'
          ? 'waiting for your review of the notebook edits'
          : waiting === 'notebook'
            ? 'waiting for the notebook'
            : waiting === 'tool'
          ? `running ${progress.detail || 'a tool'}`
          : `waiting for the model${progress.detail ? ` (${progress.detail})` : ''}`;
    node.dataset.waiting = waiting;
    const tick = () => {
      const seconds = Math.floor((elapsed + performance.now() - since) / 1000);
      const time = seconds < 60 ? `${seconds} s` : `${Math.floor(seconds / 60)} min ${String(seconds % 60).padStart(2, '0')} s`;
      node.textContent = `${time} · ${what}`;
    };
    tick();
    this._stopClock();
    this._clock = window.setInterval(() => {
      if (!node.isConnected) {
        this._stopClock();
        return;
      }
      tick();
    }, 1000);
    return node;
  }

  private _stopClock(): void {
    if (this._clock !== null) {
      window.clearInterval(this._clock);
      this._clock = null;
    }
  }

  // -- the footer: the turn in one line; steps, snapshots and the gauge folded under it --

  private _footer(data: Json): HTMLElement {
    const footer = (data.footer || {}) as Json;
    const details = this._details('footer', !!footer.open);
    details.classList.add('jsa-footer');
    const summary = el('summary', 'jsa-footer-line');
    summary.appendChild(el('span', 'jsa-footer-text', String(footer.text || 'details')));
    if (footer.open) {
      summary.appendChild(badge(String(footer.open), 'threshold'));
    }
    details.appendChild(summary);
    const steps = el('div', 'jsa-steps');
    for (const node of this._telemetry) {
      steps.appendChild(node);
    }
    details.appendChild(steps);
    if (data.budget) {
      details.appendChild(renderBudget(data.budget));
    }
    return details;
  }

  // -- approval: the pending call, highlighted, and buttons that answer the stdin prompt --

  private _approval(asking: Json, pending: Promise<void>[]): HTMLElement {
    const box = el('div', 'jsa-approval');
    box.dataset.callId = String(asking.call_id || '');
    const head = el('div', 'jsa-approval-head');
    head.appendChild(el('b', '', String(asking.tool || asking.permission || 'A tool')));
    head.appendChild(document.createTextNode(typeof asking.code === 'string' ? ' wants to run:' : ` wants to: ${asking.summary || ''}`));
    box.appendChild(head);
    if (typeof asking.code === 'string') {
      box.appendChild(this._code(asking.code, String(asking.language || ''), pending));
    }
    const cell = /^run notebook cell (.+)$/.exec(String(asking.summary || ''));
    if (asking.tool === 'notebook_run' && cell) {
      // the cell's source as it is now in the notebook: what would run
      const found = cellSource(this.node, cell[1]);
      if (found) {
        box.appendChild(el('div', 'jsa-note', `cell ${found.index}, as the notebook shows it now:`));
        box.appendChild(this._code(found.source, 'python', pending));
      }
    }
    if (asking.unsure) {
      box.appendChild(el('div', 'jsa-note jsa-approval-unsure', `Asked because the checker ${asking.unsure}`));
    }
    const buttons = el('div', 'jsa-approval-buttons');
    const status = el('span', 'jsa-approval-status');
    const feedback = el('div', 'jsa-approval-feedback jsa-hidden');
    const text = el('textarea', 'jsa-approval-text');
    text.rows = 2;
    text.placeholder = 'What should the agent do instead?';
    const send = el('button', 'jsa-button jsa-button-reject', 'Send feedback and reject');
    feedback.appendChild(text);
    feedback.appendChild(send);
    const all: HTMLButtonElement[] = [];
    const answer = (value: string, said: string) => {
      all.forEach(b => (b.disabled = true));
      send.disabled = true;
      text.disabled = true;
      status.textContent = said;
      void answerStdin(this.node, value).then(ok => {
        if (!ok) {
          status.textContent = 'No question is open in this cell (the kernel may have restarted).';
        }
      });
    };
    const button = (label: string, cls: string, title: string, act: () => void) => {
      const node = el('button', `jsa-button ${cls}`, label);
      node.title = title;
      node.addEventListener('click', act);
      all.push(node);
      buttons.appendChild(node);
    };
    button('Allow once', 'jsa-button-once', 'run this call', () => answer('o', 'Allowed once…'));
    button('Always', 'jsa-button-always', `allow ${asking.always || 'such calls'} for the rest of the session`, () =>
      answer('a', 'Allowed always…')
    );
    button('Reject', 'jsa-button-reject', 'do not run it; the turn stops', () => answer('r', 'Rejected…'));
    button('Reject with feedback', 'jsa-button-feedback', 'do not run it; tell the agent what to do instead', () => {
      feedback.classList.remove('jsa-hidden');
      text.focus();
    });
    send.addEventListener('click', () => {
      const said = text.value.trim();
      if (said) {
        answer(said, 'Rejected with feedback…');
      } else {
        text.focus();
      }
    });
    buttons.appendChild(status);
    box.appendChild(buttons);
    box.appendChild(feedback);
    return box;
  }

  /** Code as code: highlighted by JupyterLab's Markdown parser (then sanitized), plain until then. */
  private _code(code: string, language: string, pending: Promise<void>[]): HTMLElement {
    const node = el('div', 'jsa-code');
    node.dataset.language = language;
    const pre = el('pre', 'jsa-code-plain', code);
    node.appendChild(pre);
    if (this._markdown && language) {
      const longest = Math.max(2, ...(code.match(/`+/g) || []).map(run => run.length));
      const ticks = '`'.repeat(longest + 1);
      pending.push(
        this._markdown
          .render(`${ticks}${language}\n${code}\n${ticks}`)
          .then(html => {
            node.innerHTML = this._sanitizer.sanitize(html);
          })
          .catch(() => undefined)
      );
    }
    return node;
  }

  // -- remember which <details> the user opened or closed, across live updates ---------
  // Only a user's choice is kept: a part left as rendered takes the default of its new state
  // (a tool call opens when it starts running or fails, and closes when it completes).

  private _remember(): void {
    this.node.querySelectorAll('details[data-key]').forEach(node => {
      const details = node as HTMLDetailsElement;
      const key = details.dataset.key as string;
      if (details.open !== (details.dataset.default === 'open')) {
        this._open.set(key, details.open);
      } else {
        this._open.delete(key);
      }
    });
  }

  private _restore(): void {
    this.node.querySelectorAll('details[data-key]').forEach(node => {
      const details = node as HTMLDetailsElement;
      const open = this._open.get(details.dataset.key as string);
      if (open !== undefined) {
        details.open = open;
      }
    });
  }

  // -- pieces ---------------------------------------------------------------------

  private _header(data: Json): HTMLElement {
    const head = el('div', 'jsa-header');
    const session = data.session || {};
    head.appendChild(el('span', 'jsa-title', session.title || (data.view === 'budget' ? 'Token budget' : 'Agent session')));
    if (data.budget && data.budget.model) {
      head.appendChild(badge(data.budget.model, 'model'));
    }
    if (data.live) {
      head.appendChild(badge(data.asking ? 'waiting for approval' : 'running', data.asking ? 'live jsa-badge-asking' : 'live'));
      if (data.progress && typeof data.progress === 'object') {
        head.appendChild(this._progress(data.progress));
      }
    } else {
      this._stopClock();
    }
    if (session.id) {
      head.appendChild(el('span', 'jsa-id', session.id));
    }
    return head;
  }

  private _message(message: Json, pending: Promise<void>[]): HTMLElement {
    const info = message.info || {};
    const parts: Json[] = message.parts || [];
    const node = el('div', `jsa-message jsa-${info.role === 'user' ? 'user' : 'assistant'}`);
    node.dataset.id = info.id || '';
    const head = el('div', 'jsa-message-head');
    const isRequest = parts.some(p => p.type === 'compaction');
    if (info.role === 'user') {
      const synthetic = parts.length > 0 && parts.every(p => p.type !== 'text' || p.synthetic);
      if (isRequest) {
        node.classList.add('jsa-compaction-request');
        head.appendChild(el('span', 'jsa-role', 'Compaction request'));
      } else {
        head.appendChild(el('span', 'jsa-role', synthetic ? 'Continue (synthetic)' : 'You'));
      }
    } else {
      if (info.summary) {
        node.classList.add('jsa-summary');
        head.appendChild(el('span', 'jsa-role', 'Summary'));
        head.appendChild(badge('compaction summary', 'summary'));
      } else {
        head.appendChild(el('span', 'jsa-role', 'Agent'));
      }
      const bits = [`${info.providerID || ''}/${info.modelID || ''}`];
      const count = tokenCount(info.tokens);
      if (count) {
        bits.push(`${fmt(count)} tokens`);
      }
      if (num(info.cost)) {
        bits.push(usd(info.cost));
      }
      head.appendChild(el('span', 'jsa-meta', bits.join(' · ')));
      if (this._compact && !info.summary) {
        head.classList.add('jsa-hidden');
        this._telemetry.push(el('div', 'jsa-step-model', bits.join(' · ')));
      }
    }
    node.appendChild(head);
    for (const part of parts) {
      // one part, whatever its type or fields (an import's, a newer version's), never blanks
      // the others: a part that cannot be drawn shows as one line
      let rendered: HTMLElement | null;
      const type = part && typeof part.type === 'string' ? part.type : String(part && part.type);
      const safeType = type.replace(/[^A-Za-z0-9_-]/g, '_');
      const telemetry =
        this._compact && (type === 'step-start' || type === 'step-finish' || type === 'snapshot');
      if (telemetry && type === 'step-start' && !part.snapshot) {
        continue; // a bare step boundary: the model line above the step's finish says it
      }
      try {
        rendered = this._part(part || {}, pending);
      } catch (err) {
        rendered = el('div', 'jsa-unknown', `${safeType} part (cannot be shown)`);
      }
      if (rendered && telemetry) {
        rendered.classList.add('jsa-part', `jsa-part-${safeType}`);
        rendered.dataset.type = type;
        this._telemetry.push(rendered);
        continue;
      }
      if (rendered) {
        rendered.classList.add('jsa-part', `jsa-part-${safeType}`);
        rendered.dataset.type = type;
        rendered.dataset.id = String((part && part.id) || '');
        node.appendChild(rendered);
      }
    }
    if (info.error) {
      const err = info.error;
      node.appendChild(
        el('div', 'jsa-error', `${err.name || 'Error'}: ${(err.data && err.data.message) || ''}`)
      );
    }
    return node;
  }

  private _part(part: Json, pending: Promise<void>[]): HTMLElement | null {
    switch (part.type) {
      case 'text':
        return this._text(part, pending);
      case 'reasoning': {
        const details = this._details(`r:${part.id}`, false);
        const took = part.time && part.time.end ? ` · ${duration(part.time.end - part.time.start)}` : '';
        details.appendChild(el('summary', '', `reasoning${took}`));
        details.appendChild(el('div', 'jsa-reasoning-text', part.text || ''));
        details.appendChild(truncatedNote(part, 'text'));
        return details;
      }
      case 'tool':
        return this._tool(part, pending);
      case 'step-start':
        return el('div', '', part.snapshot ? `step · snapshot ${String(part.snapshot).slice(0, 10)}` : 'step');
      case 'step-finish': {
        const t = part.tokens || {};
        const cache = t.cache || {};
        const bits = [`${fmt(tokenCount(t))} tokens`, `${fmt(num(t.input) + num(cache.read) + num(cache.write))} in`];
        if (num(cache.read)) {
          bits.push(`${fmt(cache.read)} cached`);
        }
        bits.push(`${fmt(t.output)} out`);
        if (num(t.reasoning)) {
          bits.push(`${fmt(t.reasoning)} reasoning`);
        }
        const node = el('div', '');
        node.appendChild(el('span', 'jsa-step-label', 'step finished'));
        node.appendChild(el('span', 'jsa-step-tokens', bits.join(' · ')));
        node.appendChild(el('span', 'jsa-step-cost', usd(part.cost)));
        node.appendChild(badge(part.reason || '', 'reason'));
        if (t.estimated) {
          node.appendChild(badge('estimated', 'estimated'));
        }
        return node;
      }
      case 'retry': {
        const data = (part.error && part.error.data) || {};
        const status = data.statusCode ? ` (HTTP ${data.statusCode})` : '';
        // the live view re-renders every second while the wait runs: a countdown
        const time = part.time || {};
        let label = `retry ${part.attempt}`;
        if (time.next) {
          const left = time.next - Date.now();
          const waited = Math.max(0, time.next - (time.created || time.next)) / 1000;
          label += left > 0 ? ` in ${Math.max(1, Math.ceil(left / 1000))} s…` : ` after ${+waited.toFixed(2)} s`;
        }
        const node = el('div', '');
        node.appendChild(icon('retry'));
        node.appendChild(document.createTextNode(` ${label}${status}: ${data.message || ''}`));
        return node;
      }
      case 'compaction': {
        const node = el('div', 'jsa-compaction-marker');
        node.appendChild(el('span', '', 'compaction requested'));
        node.appendChild(badge(part.auto ? 'automatic' : 'manual', 'compaction'));
        if (part.overflow) {
          node.appendChild(badge('overflow', 'error'));
        }
        return node;
      }
      case 'file':
        return attachmentChip(part);
      case 'agent':
        return labelled('agent', `@${part.name || ''}`);
      case 'subtask': {
        const model = part.model ? ` · ${part.model.providerID}/${part.model.modelID}` : '';
        return labelled('subtask', `${part.agent || ''}${model}: ${part.description || ''}`);
      }
      case 'patch': {
        const files: string[] = part.files || [];
        return labelled('patch', `files changed: ${files.slice(0, 20).join(', ')}${files.length > 20 ? ` and ${files.length - 20} more` : ''}`);
      }
      case 'snapshot':
        return labelled('snapshot', String(part.snapshot || '').slice(0, 12));
      default:
        return el('div', 'jsa-unknown', `${part.type} part`);
    }
  }

  private _text(part: Json, pending: Promise<void>[]): HTMLElement | null {
    if (part.ignored || !part.text) {
      return null;
    }
    if (part.synthetic && part.metadata && typeof part.metadata.attachment === 'string') {
      // an attachment's text (a file inlined, a PDF's text, a notebook value), under its chip
      const sent = this._details(`a:${part.id}`, false);
      sent.classList.add('jsa-attachment-text');
      sent.appendChild(el('summary', '', `sent to the model (${fmt(part.text.length)} characters)`));
      sent.appendChild(el('pre', 'jsa-tool-output', part.text));
      sent.appendChild(truncatedNote(part, 'text'));
      return sent;
    }
    const node = el('div', part.synthetic ? 'jsa-synthetic' : '');
    const body = el('div', 'jsa-markdown');
    body.textContent = part.text;
    node.appendChild(body);
    node.appendChild(truncatedNote(part, 'text'));
    if (this._markdown) {
      const parser = this._markdown;
      pending.push(
        parser
          .render(part.text)
          .then(html => {
            body.innerHTML = this._sanitizer.sanitize(html);
            dropScriptUrls(body);
          })
          .catch(() => undefined)
      );
    } else {
      body.classList.add('jsa-pre');
    }
    return node;
  }

  private _tool(part: Json, pending: Promise<void>[]): HTMLElement {
    const state = part.state || {};
    const status = toolStatus(part);
    const pruned =
      (status === 'completed' || status === 'failed') && state.time && state.time.compacted;
    const failed = status === 'failed';
    const extra = (this._tools[part.id] || {}) as Json;
    // compact: one line per call, opened on a click; full: running and failed calls open
    const details = this._details(
      `t:${part.id}`,
      !this._compact && (status === 'running' || status === 'error' || status === 'interrupted' || failed)
    );
    details.dataset.status = status;
    details.classList.add(`jsa-status-${status}`);
    const summary = el('summary', 'jsa-tool-head');
    // a failed call's badge names the exception its code raised: [x] SyntaxError
    const waiting =
      this._askingCall !== '' && part.callID === this._askingCall && (status === 'running' || status === 'pending');
    if (waiting) {
      summary.appendChild(badge('waiting for approval', 'asking'));
    } else {
      const label = failed ? toolErrorClass(part) : status;
      summary.appendChild(badge(label, `status-${status}`, ICONS[status] ? status : undefined));
    }
    summary.appendChild(el('span', 'jsa-tool-name', part.tool || '?'));
    if (this._compact && extra.summary) {
      summary.appendChild(el('code', 'jsa-tool-summary', String(extra.summary)));
    } else if (state.title && state.title !== part.tool) {
      summary.appendChild(el('span', 'jsa-tool-title', state.title));
    }
    if (state.time && state.time.end) {
      summary.appendChild(el('span', 'jsa-tool-time', duration(state.time.end - state.time.start)));
    }
    if (pruned) {
      summary.appendChild(badge('pruned', 'pruned', 'pruned'));
    }
    // the exception first, then what the user decided: on the call's line, seen without opening
    if (extra.problem && (status === 'failed' || status === 'error' || status === 'interrupted')) {
      summary.appendChild(el('span', 'jsa-tool-problem', String(extra.problem)));
    }
    if (extra.decision) {
      summary.appendChild(el('span', 'jsa-tool-decision', String(extra.decision)));
    }
    details.appendChild(summary);

    const code = extra.language ? extra.code : undefined; // invisible characters made visible
    if (typeof code === 'string') {
      details.appendChild(el('div', 'jsa-label', extra.language === 'python' ? 'code' : 'command'));
      const block = this._code(code, String(extra.language), pending);
      block.classList.add('jsa-tool-input');
      details.appendChild(block);
    } else {
      const input = state.input && Object.keys(state.input).length ? JSON.stringify(state.input, null, 2) : '';
      if (input) {
        details.appendChild(el('div', 'jsa-label', 'input'));
        details.appendChild(el('pre', 'jsa-tool-input', input));
      }
    }
    if (status === 'completed' || failed) {
      if (pruned) {
        const box = el('div', 'jsa-pruned');
        box.appendChild(
          el('div', 'jsa-pruned-note', `Output pruned at ${clock(state.time.compacted)}: the model now sees “[Old tool result content cleared]”.`)
        );
        const original = this._details(`p:${part.id}`, false);
        original.appendChild(el('summary', '', `original output (${fmt((state.output || '').length)} characters)`));
        original.appendChild(el('pre', 'jsa-tool-output', state.output || ''));
        original.appendChild(truncatedNote(part, 'state.output'));
        box.appendChild(original);
        details.appendChild(box);
      } else {
        details.appendChild(el('div', 'jsa-label', 'output'));
        details.appendChild(this._output(`o:${part.id}`, state.output || '', part, 'state.output'));
      }
    } else if (status === 'error' || status === 'interrupted') {
      details.appendChild(el('div', 'jsa-label', status === 'interrupted' ? 'interrupted' : 'error'));
      details.appendChild(this._output(`o:${part.id}`, state.error || '', part, 'state.error'));
    }
    return details;
  }

  /** A tool output: short ones whole; long ones as a preview plus a collapsed full view. */
  private _output(key: string, text: string, part: Json, field: string): HTMLElement {
    const box = el('div', 'jsa-output');
    const lines = text.split('\n');
    if (lines.length <= PREVIEW_LINES) {
      box.appendChild(el('pre', 'jsa-tool-output', text));
    } else {
      box.appendChild(el('pre', 'jsa-tool-output jsa-preview', lines.slice(0, PREVIEW_LINES).join('\n')));
      const more = this._details(key, false);
      more.classList.add('jsa-long-output');
      const full = part.truncated && part.truncated[field];
      more.appendChild(
        el('summary', '', full ? `show the ${fmt(lines.length)} lines kept (of ${fmt(full)} characters)` : `show all ${fmt(lines.length)} lines`)
      );
      more.appendChild(el('pre', 'jsa-tool-output', text));
      box.appendChild(more);
    }
    box.appendChild(truncatedNote(part, field));
    return box;
  }

  private _details(key: string, open: boolean): HTMLDetailsElement {
    const details = el('details');
    details.dataset.key = key;
    details.dataset.default = open ? 'open' : 'closed';
    details.open = open;
    return details;
  }

  private _mimeType: string;
  private _compact = false;
  private _tools: Json = {};
  private _askingCall = '';
  private _telemetry: HTMLElement[] = [];
  private _clock: number | null = null;
  private _sanitizer: IRenderMime.ISanitizer;
  private _markdown: IRenderMime.IMarkdownParser | null;
  private _open = new Map<string, boolean>();
}

/**
 * Answer the kernel's open stdin question in this cell's output area: JupyterLab shows it as
 * a text box (the kernel is busy running the cell, so stdin is the channel that works); its
 * value is set and Enter pressed, as a user would. Waits a little for the box to appear (the
 * question follows the view that shows it). False when no box appears.
 */
export async function answerStdin(node: HTMLElement, value: string, timeout = 10000): Promise<boolean> {
  const area = node.closest('.jp-OutputArea') || node.parentElement;
  const deadline = Date.now() + timeout;
  while (Date.now() < deadline) {
    const input = area ? (area.querySelector('.jp-Stdin-input') as HTMLInputElement | null) : null;
    if (input) {
      input.value = value;
      input.dispatchEvent(new Event('input', { bubbles: true }));
      const enter = { key: 'Enter', code: 'Enter', keyCode: 13, which: 13, bubbles: true, cancelable: true };
      input.dispatchEvent(new KeyboardEvent('keydown', enter));
      return true;
    }
    await new Promise(resolve => setTimeout(resolve, 100));
  }
  return false;
}

/** A byte count for people: `1,234 bytes`, `12.3 KB` (as the Markdown form). */
function bytes(value: any): string {
  let n = num(value);
  if (n < 1024) {
    return `${fmt(n)} bytes`;
  }
  let unit = 'KB';
  for (const next of ['KB', 'MB', 'GB']) {
    n /= 1024;
    unit = next;
    if (n < 1024) {
      break;
    }
  }
  return `${n.toFixed(1)} ${unit}`;
}

/**
 * A file part as a chip: icon, name, type, size, where it came from (a mention, a notebook
 * value); an image whose data is whole in the output also shows as a thumbnail.
 */
export function attachmentChip(part: Json): HTMLElement {
  const source = (part.source && typeof part.source === 'object' ? part.source : {}) as Json;
  const chip = el('div', 'jsa-chip');
  chip.appendChild(icon('file'));
  chip.appendChild(el('span', 'jsa-chip-name', part.filename || String(part.url || '').slice(0, 80)));
  const bits = [String(part.mime || '')];
  if (typeof source.size === 'number') {
    bits.push(bytes(source.size));
  }
  if (source.type === 'variable') {
    bits.push(`notebook value (${source.kind || '?'})`);
  } else if (source.text && source.text.value) {
    bits.push(`mentioned as ${source.text.value}`);
  }
  chip.appendChild(el('span', 'jsa-chip-meta', bits.join(' · ')));
  chip.title = String(source.path || source.name || part.filename || '');
  const url = String(part.url || '');
  const whole = !(part.truncated && part.truncated.url);
  if (whole && /^data:image\/(png|jpeg|gif|webp);base64,/.test(url)) {
    const img = el('img', 'jsa-chip-thumb');
    img.src = url;
    img.alt = part.filename || 'image';
    chip.appendChild(img);
  }
  return chip;
}

function truncatedNote(part: Json, field: string): HTMLElement {
  const full = part.truncated && part.truncated[field];
  if (!full) {
    return el('span', 'jsa-hidden');
  }
  return el('div', 'jsa-note jsa-truncated', `truncated in the notebook output: ${fmt(full)} characters in the history (see %agent sql)`);
}

// -- the budget gauge ---------------------------------------------------------------

function segment(cls: string, from: number, to: number, total: number, title: string): HTMLElement {
  const node = el('div', `jsa-seg ${cls}`);
  node.style.left = `${(100 * from) / total}%`;
  node.style.width = `${Math.max(0, (100 * (to - from)) / total)}%`;
  node.title = title;
  return node;
}

function marker(cls: string, at: number, total: number, label: string): HTMLElement {
  const node = el('div', `jsa-marker ${cls}`);
  node.style.left = `${Math.min(100, (100 * at) / total)}%`;
  node.appendChild(el('span', 'jsa-marker-label', label));
  node.title = label;
  return node;
}

export function renderBudget(b: Json): HTMLElement {
  const box = el('div', 'jsa-budget');
  const used = num(b.used);
  const usable = num(b.usable);
  const reserved = num(b.reserved);
  const window = num(b.input_limit) || num(b.context);
  const fraction = usable ? used / usable : 0;
  const level = b.overflow || fraction >= 0.85 ? 'danger' : fraction >= 0.5 ? 'warning' : 'ok';

  const title = el('div', 'jsa-budget-title');
  title.appendChild(el('span', 'jsa-budget-label', 'Context'));
  title.appendChild(
    el('span', `jsa-budget-used jsa-level-${level}`, usable ? `${fmt(used)} / ${fmt(usable)} usable (${Math.round(fraction * 100)}%)` : `${fmt(used)} tokens · window unknown`)
  );
  if (b.used_estimated) {
    title.appendChild(badge('estimated', 'estimated'));
  }
  if (b.overflow) {
    title.appendChild(badge('compaction due', 'error'));
  }
  box.appendChild(title);

  if (window && usable) {
    const total = Math.max(window, used);
    const gauge = el('div', 'jsa-gauge');
    gauge.appendChild(segment(`jsa-seg-used jsa-level-${level}`, 0, Math.min(used, total), total, `used by the last step: ${fmt(used)}`));
    gauge.appendChild(segment('jsa-seg-reserved', usable, Math.min(usable + reserved, total), total, `reserved: ${fmt(reserved)}`));
    if (!num(b.input_limit)) {
      gauge.appendChild(segment('jsa-seg-output', usable + reserved, total, total, `max output: ${fmt(b.max_output)}`));
    }
    const at = num(b.compaction_at) || usable;
    gauge.appendChild(marker('jsa-marker-usable', b.auto_compact ? at : usable, total, b.auto_compact ? `compact ${short(at)}` : `usable ${short(usable)}`));
    box.appendChild(gauge);
    const legend = el('div', 'jsa-legend');
    legend.appendChild(el('span', 'jsa-key jsa-key-used', `used ${fmt(used)}`));
    legend.appendChild(el('span', 'jsa-key jsa-key-free', `free ${fmt(Math.max(0, usable - used))}`));
    legend.appendChild(el('span', 'jsa-key jsa-key-reserved', `reserved ${fmt(reserved)}`));
    if (!num(b.input_limit)) {
      legend.appendChild(el('span', 'jsa-key jsa-key-output', `max output ${fmt(b.max_output)}`));
    }
    legend.appendChild(el('span', 'jsa-key', num(b.input_limit) ? `input limit ${fmt(b.input_limit)}` : `window ${fmt(b.context)}`));
    box.appendChild(legend);
  }

  const triggers = el('div', 'jsa-triggers');
  triggers.appendChild(
    el('div', 'jsa-trigger-compaction', b.auto_compact ? (usable ? `Compaction at ${fmt(num(b.compaction_at) || usable)} tokens (${fmt(Math.max(0, (num(b.compaction_at) || usable) - used))} left)` : 'Compaction: window unknown') : 'Automatic compaction off')
  );
  if (b.prune) {
    const trigger = num(b.prune_trigger);
    const walked = num(b.tool_output_tokens);
    const total = Math.max(trigger * 1.15, walked, 1);
    const prune = el('div', 'jsa-prune');
    prune.appendChild(
      el('div', 'jsa-prune-text', `Prune above ${fmt(trigger)} tool-output tokens (keeps the newest ${fmt(b.prune_protect)}): now ${fmt(walked)}${num(b.prunable_tokens) ? `, ${fmt(b.prunable_tokens)} prunable` : ''}${b.prune_due ? ' — due' : ''}`)
    );
    const bar = el('div', 'jsa-gauge jsa-gauge-small');
    bar.appendChild(segment(`jsa-seg-used jsa-level-${b.prune_due ? 'danger' : 'ok'}`, 0, walked, total, `tool output: ${fmt(walked)}`));
    bar.appendChild(marker('jsa-marker-protect', num(b.prune_protect), total, `protect ${short(b.prune_protect)}`));
    bar.appendChild(marker('jsa-marker-prune', trigger, total, `prune ${short(trigger)}`));
    prune.appendChild(bar);
    triggers.appendChild(prune);
  } else {
    triggers.appendChild(el('div', 'jsa-prune-text', 'Pruning off'));
  }
  if (num(b.pruned_parts)) {
    const count = el('div', 'jsa-pruned-count');
    count.appendChild(icon('pruned'));
    count.appendChild(
      document.createTextNode(` ${fmt(b.pruned_parts)} tool output${num(b.pruned_parts) === 1 ? '' : 's'} pruned (${fmt(b.pruned_tokens)} tokens)`)
    );
    triggers.appendChild(count);
  }
  box.appendChild(triggers);

  const steps: Json[] = b.steps || [];
  if (steps.length) {
    box.appendChild(sparkline(steps, usable));
  }
  const stats = el('div', 'jsa-stats');
  const pairs: [string, string][] = [
    ['cost', usd(b.cost)],
    ['steps', fmt(steps.length + num(b.steps_omitted))],
    ['turns', fmt(b.turns)],
    ['compactions', fmt(b.compactions)],
    ['in', fmt(b.input_tokens)],
    ['out', fmt(b.output_tokens)]
  ];
  for (const [label, value] of pairs) {
    const stat = el('span', `jsa-stat jsa-stat-${label}`);
    stat.appendChild(el('b', '', value));
    stat.appendChild(document.createTextNode(` ${label}`));
    stats.appendChild(stat);
  }
  box.appendChild(stats);
  return box;
}

const SVG = 'http://www.w3.org/2000/svg';

function svg(tag: string, attrs: { [key: string]: string | number }): SVGElement {
  const node = document.createElementNS(SVG, tag);
  for (const key of Object.keys(attrs)) {
    node.setAttribute(key, String(attrs[key]));
  }
  return node;
}

/**
 * One bar per step (context tokens), a mark at each compaction, and a dashed line at `usable`
 * when it is near the bars. The chart is scaled to the tallest bar: a usable budget far above
 * every step would leave an empty band over flat bars, so it is then named in the legend only.
 */
function sparkline(steps: Json[], usable: number): HTMLElement {
  const box = el('div', 'jsa-sparkline');
  box.appendChild(el('span', 'jsa-label', 'context per step'));
  const width = Math.max(72, Math.min(360, steps.length * 12));
  const height = 32;
  const peak = Math.max(...steps.map(s => num(s.tokens)), 1);
  const line = usable > 0 && usable <= peak * USABLE_IN_CHART;
  const top = line ? Math.max(usable, peak) : peak;
  const step = width / Math.max(steps.length, 1);
  const bar = Math.max(1, Math.min(9, step * 0.75));
  const chart = svg('svg', { width, height, viewBox: `0 0 ${width} ${height}`, class: 'jsa-spark' });
  steps.forEach((s, i) => {
    const h = Math.max(1.5, (num(s.tokens) / top) * height);
    const x = i * step;
    if (s.after_compaction) {
      const mark = svg('line', { x1: x - 0.5, x2: x - 0.5, y1: 0, y2: height, class: 'jsa-spark-compaction' });
      mark.appendChild(svgTitle('compaction'));
      chart.appendChild(mark);
    }
    const rect = svg('rect', {
      x: x + (step - bar) / 2,
      y: height - h,
      width: bar,
      height: h,
      class: s.summary ? 'jsa-spark-bar jsa-spark-summary' : 'jsa-spark-bar'
    });
    rect.appendChild(svgTitle(`step ${i + 1}: ${fmt(s.tokens)} tokens, ${usd(s.cost)}${s.summary ? ' (summary)' : ''}`));
    chart.appendChild(rect);
  });
  if (line) {
    const y = Math.max(1, height - (usable / top) * height);
    chart.appendChild(svg('line', { x1: 0, x2: width, y1: y, y2: y, class: 'jsa-spark-usable' }));
  }
  box.appendChild(chart);
  const legend = el('span', 'jsa-legend jsa-spark-legend');
  legend.appendChild(el('span', 'jsa-key jsa-key-step', `step (peak ${short(peak)})`));
  if (steps.some(s => s.summary)) {
    legend.appendChild(el('span', 'jsa-key jsa-key-summary', 'summary'));
  }
  if (steps.some(s => s.after_compaction)) {
    legend.appendChild(el('span', 'jsa-key jsa-key-compaction', 'compaction'));
  }
  if (line) {
    legend.appendChild(el('span', 'jsa-key jsa-key-usable', `usable ${short(usable)}`));
  } else if (usable) {
    legend.appendChild(el('span', 'jsa-key', `usable ${short(usable)}: ${Math.round((100 * peak) / usable)}% at the peak`));
  }
  box.appendChild(legend);
  return box;
}

function svgTitle(text: string): SVGElement {
  const title = document.createElementNS(SVG, 'title');
  title.textContent = text;
  return title;
}

export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [MIME_TYPE],
  defaultRank: 0,
  createRenderer: options => new TranscriptWidget(options)
};

const extension: IRenderMime.IExtension = {
  id: 'jupyter-session-agent:transcript',
  rendererFactory,
  rank: 0,
  dataType: 'json'
};

export default extension;
