/**
 * The open notebook for the agent's notebook tools (`tools/frontend.py` in the package).
 *
 * The kernel is busy running the `%%agent` cell, so it asks on the stdin channel: the live
 * view of that cell carries a `frontend` request `{protocol, nonce, action, ...}` and the
 * kernel's stdin box (hidden) asks a question ending with `[jsa-frontend/1 <nonce>]`. The
 * renderer calls `handleRequest`, which does the request on the live notebook model and types
 * one line of JSON `{nonce, ...}` into that box — only the box whose prompt names the same
 * nonce. Actions:
 *
 * - `read`: every cell (id, type, source, execution count, outputs with big values cut);
 * - `edit`: each proposed change shown in place as a diff with Accept / Reject (with
 *   feedback) / Accept all; accepted ones are applied to the notebook model (so the notebook's
 *   own undo takes them back), then the answer lists what was decided. With `allowed` (a rule
 *   allows the edits) they are applied at once and shown for a moment.
 *
 * A notebook closed during a review answers through the kernel connection itself (its stdin
 * box is gone with it): every edit not decided is rejected, with that reason.
 */

import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

type Json = { [key: string]: any };

export const PROTOCOL = 'jsa-frontend/1';
const MAX_TEXT = 2000; // characters of one output's text sent to the kernel
const MAX_OUTPUTS = 20; // outputs of one cell
const MAX_SOURCE = 200000; // characters of one cell's source
const MAX_ANSWER = 6000000; // characters of the whole answer

let tracker: INotebookTracker | null = null;
let kernels: any = null; // the service manager's kernels: a new connection when a notebook closed
const handled = new Set<string>(); // nonces answered or being answered
const questions = new Map<string, { header: any; panel: NotebookPanel; kernel: any }>(); // nonce → the kernel's question
const reviews = new Map<string, (why: string) => void>(); // nonce → reject what is left (the notebook closes)
const dropped = new Set<string>(); // nonces whose kernel restarted or went: nobody waits for the answer
const closed = new Set<string>(); // nonces whose notebook closed: answered by the kernel connection
const arrived = new Map<string, number>(); // nonce → ms from the kernel's request to this page

/** Called by the plugin: the notebooks, and each one's kernel questions. */
export function setTracker(value: INotebookTracker, kernelManager: any = null): void {
  tracker = value;
  kernels = kernelManager;
  value.widgetAdded.connect((_, panel) => watch(panel));
  value.forEach(panel => watch(panel));
}

function watch(panel: NotebookPanel): void {
  const connect = () => {
    const kernel = panel.sessionContext.session?.kernel;
    if (!kernel || (kernel as any).__jsaWatched) {
      return;
    }
    (kernel as any).__jsaWatched = true;
    kernel.anyMessage.connect((_, args) => {
      const msg: any = args.msg;
      if (args.direction !== 'recv' || msg.channel !== 'stdin' || msg.header.msg_type !== 'input_request') {
        return;
      }
      const found = /\[jsa-frontend\/1 ([0-9a-f]+)\]: $/.exec(String(msg.content.prompt || ''));
      if (found) {
        questions.set(found[1], { header: msg.header, panel, kernel });
      }
    });
  };
  // the kernel that asked restarts or is replaced: its question is gone with it, so an
  // open review ends (rejected, its buttons off) and a later click never edits the notebook
  const abandon = (why: string) => {
    for (const [nonce, reject] of Array.from(reviews.entries())) {
      const question = questions.get(nonce);
      if (question && question.panel === panel) {
        dropped.add(nonce);
        reject(why);
      }
    }
  };
  panel.sessionContext.ready.then(connect).catch(() => undefined);
  panel.sessionContext.kernelChanged.connect((_, change) => {
    if (change.newValue && !panel.isDisposed) {
      abandon('the kernel changed during the review'); // another kernel chosen (closing: below)
    }
    connect();
  });
  panel.sessionContext.statusChanged.connect((_, status) => {
    if (status === 'restarting' || status === 'autorestarting') {
      abandon('the kernel restarted during the review');
    }
  });
  panel.disposed.connect(() => {
    for (const [nonce, reject] of Array.from(reviews.entries())) {
      const question = questions.get(nonce);
      if (question && question.panel === panel) {
        closed.add(nonce);
        reject('the notebook was closed during the review');
      }
    }
  });
}

/** The notebook panel a rendered output belongs to. */
export function panelOf(node: HTMLElement): NotebookPanel | null {
  return tracker ? tracker.find(panel => panel.node.contains(node)) || null : null;
}

/** Does the request for this live view still wait (an update re-renders the view)? */
export function isPending(request: Json): boolean {
  return !!request && !handled.has(String(request.nonce));
}

/**
 * Do what `request` asks on the notebook that holds `node` and answer the kernel; `show` puts a
 * short status in the transcript view. Nothing is done when this output is not in a notebook,
 * or when the notebook's kernel is not asking about this request now.
 */
export function handleRequest(node: HTMLElement, request: Json, show: (said: string) => void): void {
  const said = start(node, request, show);
  if (said) {
    show(said);
  }
}

function start(node: HTMLElement, request: Json, show: (said: string) => void): string | null {
  const nonce = String(request.nonce || '');
  if (request.protocol !== PROTOCOL || !/^[0-9a-f]{8,64}$/.test(nonce)) {
    return null;
  }
  const panel = panelOf(node);
  if (!panel) {
    return null; // a copy of the output outside the notebook: the one inside answers
  }
  if (handled.has(nonce)) {
    return request.action === 'edit' && !request.allowed ? 'Review the proposed edits in the notebook.' : null;
  }
  handled.add(nonce);
  arrived.set(nonce, Date.now() - Number(request.sent || Date.now())); // the baseline: transport alone
  if (!askedBy(nonce, panel)) {
    // Only a request the kernel is asking about now, on this notebook's stdin channel, is done:
    // a request in a saved output (the notebook saved during a review and opened again) or one
    // a notebook from elsewhere carries is never answered and never edits the notebook.
    void whenAsked(nonce, panel).then(ok => {
      const said = ok ? perform(node, panel, nonce, request) : null;
      if (said) {
        show(said);
      } else if (!ok) {
        handled.delete(nonce);
      }
    });
    return null;
  }
  return perform(node, panel, nonce, request);
}

/** Is the kernel behind `panel` asking the question naming `nonce` now? (Two views of one
 * notebook share its kernel: either may be the one that renders the request first.) */
function askedBy(nonce: string, panel: NotebookPanel): boolean {
  const asked = questions.get(nonce);
  const kernel = panel.sessionContext.session?.kernel;
  return !!asked && !!kernel && (asked.panel === panel || asked.kernel.id === kernel.id);
}

/** Resolves true once the kernel behind `panel` asks the question naming `nonce` (its stdin
 * `input_request` follows the view's update), false when it does not within `ms`. */
function whenAsked(nonce: string, panel: NotebookPanel, ms = 15000): Promise<boolean> {
  const until = Date.now() + ms;
  return new Promise(resolve => {
    const poll = () => {
      if (askedBy(nonce, panel)) {
        resolve(true);
      } else if (Date.now() > until || panel.isDisposed) {
        resolve(false);
      } else {
        window.setTimeout(poll, 50);
      }
    };
    poll();
  });
}

function perform(node: HTMLElement, panel: NotebookPanel, nonce: string, request: Json): string | null {
  const answer = (value: Json) => void send(node, panel, nonce, { ...value, nonce });
  if (request.action === 'read') {
    // a huge notebook: sources cut shorter until the answer fits (the model sees 8,000 per cell)
    let cells = readCells(panel, MAX_SOURCE);
    for (const cap of [8000, 1000]) {
      if (JSON.stringify(cells).length <= MAX_ANSWER - 1000) {
        break;
      }
      cells = readCells(panel, cap);
    }
    answer({ cells });
    return 'Reading the notebook…';
  }
  if (request.action === 'edit') {
    review(panel, nonce, Array.isArray(request.edits) ? request.edits : [], !!request.allowed, Number(request.sent), answer);
    return request.allowed ? 'Applying the edits (a rule allows them)…' : 'Review the proposed edits in the notebook.';
  }
  answer({ error: `this extension does not know the action ${String(request.action).slice(0, 40)}` });
  return null;
}

/** The answer, typed into the stdin box that asked (or, when it is gone, sent by the kernel connection). */
async function send(node: HTMLElement, panel: NotebookPanel, nonce: string, value: Json): Promise<void> {
  if (dropped.has(nonce)) {
    questions.delete(nonce);
    return; // the kernel that asked is gone: the new one did not ask
  }
  let text = JSON.stringify(value);
  if (text.length > MAX_ANSWER) {
    text = JSON.stringify({ nonce, error: `the notebook is too large to send (${text.length} characters)` });
  }
  const area = node.closest('.jp-OutputArea');
  const deadline = Date.now() + 20000;
  while (Date.now() < deadline && area && node.isConnected && !closed.has(nonce)) {
    for (const box of Array.from(area.querySelectorAll('.jp-Stdin'))) {
      const prompt = box.querySelector('.jp-Stdin-prompt');
      const input = box.querySelector('.jp-Stdin-input') as HTMLInputElement | null;
      if (input && prompt && (prompt.textContent || '').includes(`[${PROTOCOL} ${nonce}]`)) {
        input.value = text;
        input.dispatchEvent(new Event('input', { bubbles: true }));
        const enter = { key: 'Enter', code: 'Enter', keyCode: 13, which: 13, bubbles: true, cancelable: true };
        input.dispatchEvent(new KeyboardEvent('keydown', enter));
        questions.delete(nonce);
        return;
      }
    }
    await new Promise(resolve => setTimeout(resolve, 50));
  }
  // the stdin box is gone (the notebook closed): the kernel connection answers
  const question = questions.get(nonce);
  if (!question) {
    return;
  }
  questions.delete(nonce);
  let kernel = question.kernel;
  if (kernel.isDisposed && kernels) {
    // the notebook's connection closed with it; the kernel takes an input reply from any
    kernel = kernels.connectTo({ model: { id: question.kernel.id, name: question.kernel.name } });
    const until = Date.now() + 10000;
    while (kernel.connectionStatus !== 'connected' && Date.now() < until) {
      await new Promise(resolve => setTimeout(resolve, 50));
    }
    window.setTimeout(() => kernel.dispose(), 5000);
  }
  if (!kernel.isDisposed) {
    kernel.sendInputReply({ status: 'ok', value: text } as any, question.header);
  }
}

// -- read ---------------------------------------------------------------------------------

function text(value: any): string {
  return Array.isArray(value) ? value.join('') : typeof value === 'string' ? value : JSON.stringify(value);
}

function cut(value: string, limit: number): string {
  return value.length <= limit ? value : `${value.slice(0, limit)}… [${value.length - limit} more characters]`;
}

/** Outputs as nbformat, each text cut and every other MIME value replaced by its size. */
function outputs(list: any[]): Json[] {
  return list.slice(0, MAX_OUTPUTS).map(output => {
    const out: Json = { output_type: output.output_type };
    if (output.output_type === 'stream') {
      out.text = cut(text(output.text), MAX_TEXT);
    } else if (output.output_type === 'error') {
      out.ename = String(output.ename || '');
      out.evalue = cut(String(output.evalue || ''), MAX_TEXT);
    } else if (output.data) {
      out.data = {};
      out.jsa_sizes = {};
      for (const mime of Object.keys(output.data)) {
        if (mime === 'text/plain') {
          out.data[mime] = cut(text(output.data[mime]), MAX_TEXT);
        } else {
          out.data[mime] = '';
          out.jsa_sizes[mime] = text(output.data[mime]).length;
        }
      }
    }
    return out;
  });
}

function readCells(panel: NotebookPanel, sourceCap: number): Json[] {
  const model = panel.content.model;
  const cells: Json[] = [];
  if (!model) {
    return cells;
  }
  for (let i = 0; i < model.cells.length; i++) {
    const cell = model.cells.get(i);
    const data = cell.toJSON() as Json;
    cells.push({
      id: cell.id,
      cell_type: cell.type,
      source: cut(cell.sharedModel.getSource(), sourceCap),
      execution_count: cell.type === 'code' ? (data.execution_count ?? null) : null,
      outputs: cell.type === 'code' ? outputs(data.outputs || []) : []
    });
  }
  return cells;
}

/** The current source of cell `ref` (id or index) of the notebook holding `node`, or null. */
export function cellSource(node: HTMLElement, ref: string): { index: number; source: string } | null {
  const panel = panelOf(node);
  const model = panel ? panel.content.model : null;
  if (!model) {
    return null;
  }
  const index = findIndex(panel!, ref);
  return index === null ? null : { index, source: model.cells.get(index).sharedModel.getSource() };
}

function findIndex(panel: NotebookPanel, ref: any): number | null {
  const model = panel.content.model!;
  const key = String(ref ?? '').trim();
  for (let i = 0; i < model.cells.length; i++) {
    if (key && model.cells.get(i).id === key) {
      return i;
    }
  }
  if (!/^-?\d+$/.test(key)) {
    return null;
  }
  const n = Number(key);
  const count = model.cells.length;
  return n >= -count && n < count ? (n + count) % count : null;
}

// -- edit ---------------------------------------------------------------------------------

/** A line diff (longest common subsequence): [' ' | '-' | '+', line][] */
export function lineDiff(before: string, after: string): [string, string][] {
  const a = before.split('\n');
  const b = after.split('\n');
  if (a.length * b.length > 4000000) {
    return [...a.map(l => ['-', l] as [string, string]), ...b.map(l => ['+', l] as [string, string])];
  }
  const lcs: number[][] = Array.from({ length: a.length + 1 }, () => new Array(b.length + 1).fill(0));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out: [string, string][] = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) {
      out.push([' ', a[i++]]);
      j++;
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) {
      out.push(['-', a[i++]]);
    } else {
      out.push(['+', b[j++]]);
    }
  }
  while (i < a.length) {
    out.push(['-', a[i++]]);
  }
  while (j < b.length) {
    out.push(['+', b[j++]]);
  }
  return out;
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, className?: string, content?: string): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (content !== undefined) {
    node.textContent = content;
  }
  return node;
}

type Decision = { status: 'accepted' | 'rejected'; feedback?: string; cell_id?: string; error?: string };

interface Proposal {
  edit: Json;
  target: any | null; // the cell model replaced / deleted / inserted after (null: the end or the top)
  before?: string; // the target's source the diff shows (replace / delete)
  box: HTMLElement;
  decision?: Decision;
}

function review(
  panel: NotebookPanel,
  nonce: string,
  edits: Json[],
  allowed: boolean,
  sent: number,
  answer: (value: Json) => void
): void {
  const model = panel.content.model!;
  const proposals: Proposal[] = edits.map((edit, n) => {
    let target: any = null;
    let problem = '';
    if (edit.op === 'insert') {
      if (edit.cell === 'start') {
        target = 'start';
      } else if (edit.cell !== null && edit.cell !== undefined && String(edit.cell) !== '-1') {
        const index = findIndex(panel, edit.cell);
        target = index === null ? null : model.cells.get(index);
        problem = index === null ? `no cell ${edit.cell}` : '';
      }
    } else {
      const index = findIndex(panel, edit.cell);
      target = index === null ? null : model.cells.get(index);
      problem = index === null ? `no cell ${edit.cell}` : '';
    }
    const box = el('div', 'jsa-review');
    box.dataset.edit = String(n);
    box.dataset.op = String(edit.op);
    const proposal: Proposal = { edit, target, box };
    if (problem) {
      proposal.decision = { status: 'rejected', error: problem };
    }
    return proposal;
  });
  const finish = () => {
    if (proposals.some(p => !p.decision)) {
      return;
    }
    reviews.delete(nonce);
    const results = proposals.map(p => p.decision);
    window.setTimeout(() => proposals.forEach(p => p.box.remove()), allowed ? 4000 : 600);
    answer({ results });
  };
  const decide = (p: Proposal, decision: Decision) => {
    if (p.decision) {
      return;
    }
    if (decision.status === 'accepted') {
      try {
        decision.cell_id = apply(panel, p);
      } catch (err) {
        decision = { status: 'rejected', error: `could not apply it: ${String(err).slice(0, 200)}` };
      }
    }
    p.decision = decision;
    const done = p.box.querySelector('.jsa-review-status');
    if (done) {
      done.textContent =
        decision.status === 'accepted'
          ? allowed
            ? 'Applied (a rule allows notebook edits)'
            : 'Accepted'
          : `Rejected${decision.feedback ? `: ${decision.feedback}` : ''}${decision.error ? ` (${decision.error})` : ''}`;
    }
    p.box.classList.add(`jsa-review-${decision.status}`);
    p.box.querySelectorAll('button, textarea').forEach(b => ((b as HTMLButtonElement).disabled = true));
    finish();
  };
  reviews.set(nonce, (why: string) => proposals.forEach(p => decide(p, { status: 'rejected', error: why })));
  proposals.forEach((p, n) => {
    build(panel, p, n, proposals.length, allowed, {
      accept: () => decide(p, { status: 'accepted' }),
      reject: (feedback: string) => decide(p, { status: 'rejected', feedback }),
      acceptAll: () => proposals.forEach(q => decide(q, { status: 'accepted' }))
    });
  });
  // from the kernel's request to the diffs in the page (same machine, same clock)
  const latency = Date.now() - Number(sent || Date.now());
  proposals.forEach(p => {
    p.box.dataset.latencyMs = String(latency);
    p.box.dataset.arrivedMs = String(arrived.get(nonce) ?? '');
  });
  if (allowed) {
    proposals.forEach(p => decide(p, { status: 'accepted' }));
  }
  finish(); // every edit named a missing cell: nothing to wait for
}

function build(
  panel: NotebookPanel,
  p: Proposal,
  n: number,
  total: number,
  allowed: boolean,
  act: { accept: () => void; reject: (feedback: string) => void; acceptAll: () => void }
): void {
  const { edit, box } = p;
  const old = p.target && p.target !== 'start' && edit.op !== 'insert' ? p.target.sharedModel.getSource() : '';
  p.before = old;
  const kind = edit.op === 'delete' ? (p.target ? p.target.type : 'cell') : edit.cell_type || 'code';
  const head = el('div', 'jsa-review-head');
  const what = { insert: `insert a new ${kind} cell here`, replace: `replace this ${kind} cell`, delete: 'delete this cell' } as Json;
  head.appendChild(el('b', '', `Agent edit ${n + 1} of ${total}: `));
  head.appendChild(document.createTextNode(what[edit.op] || String(edit.op)));
  box.appendChild(head);
  const diff = el('pre', 'jsa-review-diff');
  const lines = edit.op === 'insert' ? lineDiff('', edit.source || '').filter(([, l], i) => i > 0 || l !== '') : lineDiff(old, edit.op === 'delete' ? '' : edit.source || '');
  for (const [mark, line] of lines) {
    if (edit.op === 'delete' && mark === '+' && line === '') {
      continue;
    }
    const row = el('span', mark === '+' ? 'jsa-diff-add' : mark === '-' ? 'jsa-diff-del' : 'jsa-diff-same', `${mark} ${line}\n`);
    diff.appendChild(row);
  }
  box.appendChild(diff);
  const buttons = el('div', 'jsa-review-buttons');
  const status = el('span', 'jsa-review-status');
  const feedback = el('div', 'jsa-review-feedback jsa-hidden');
  const textarea = el('textarea', 'jsa-review-text');
  textarea.rows = 2;
  textarea.placeholder = 'What should the agent do instead?';
  const sendFeedback = el('button', 'jsa-button jsa-button-reject', 'Send feedback and reject');
  feedback.appendChild(textarea);
  feedback.appendChild(sendFeedback);
  const button = (label: string, cls: string, click: () => void) => {
    const node = el('button', `jsa-button ${cls}`, label);
    node.addEventListener('click', click);
    buttons.appendChild(node);
  };
  if (!allowed) {
    button('Accept', 'jsa-button-once', act.accept);
    button('Reject', 'jsa-button-reject', () => act.reject(''));
    button('Reject with feedback', 'jsa-button-feedback', () => {
      feedback.classList.remove('jsa-hidden');
      textarea.focus();
    });
    if (total > 1) {
      button('Accept all', 'jsa-button-always', act.acceptAll);
    }
  }
  sendFeedback.addEventListener('click', () => {
    const said = textarea.value.trim();
    if (said) {
      act.reject(said);
    } else {
      textarea.focus();
    }
  });
  buttons.appendChild(status);
  box.appendChild(buttons);
  box.appendChild(feedback);
  place(panel, p);
}

/** The review box in place: in the cell it changes, or after the cell a new one follows. */
function place(panel: NotebookPanel, p: Proposal): void {
  const notebook = panel.content;
  const widgetOf = (model: any) => notebook.widgets.find(w => w.model === model) || null;
  // inside a cell's node (never between the cells: the notebook's layout owns those)
  if (p.edit.op === 'insert') {
    if (p.target === 'start') {
      const first = notebook.widgets[0];
      first?.node.insertBefore(p.box, first.node.firstChild);
    } else {
      const after = p.target ? widgetOf(p.target) : notebook.widgets[notebook.widgets.length - 1];
      after?.node.appendChild(p.box);
    }
  } else {
    const widget = widgetOf(p.target);
    if (widget) {
      p.box.classList.add('jsa-review-in-cell');
      widget.node.insertBefore(p.box, widget.node.firstChild);
    }
  }
  p.box.scrollIntoView({ block: 'nearest' });
}

/** Apply an accepted edit to the notebook model (one undoable step); the cell's id. */
function apply(panel: NotebookPanel, p: Proposal): string {
  const model = panel.content.model!;
  const shared = model.sharedModel;
  const indexOf = (cell: any) => {
    for (let i = 0; i < model.cells.length; i++) {
      if (model.cells.get(i) === cell) {
        return i;
      }
    }
    throw new Error('the cell is gone from the notebook');
  };
  const { edit } = p;
  const cellType = edit.cell_type === 'markdown' ? 'markdown' : 'code';
  if (edit.op === 'insert') {
    const index = p.target === 'start' ? 0 : p.target ? indexOf(p.target) + 1 : model.cells.length;
    const cell = shared.insertCell(index, { cell_type: cellType, source: String(edit.source || '') } as any);
    return cell.id;
  }
  const index = indexOf(p.target);
  if (p.before !== undefined && p.target.sharedModel.getSource() !== p.before) {
    // the user changed the cell while the diff was open: the diff no longer says what
    // Accept would do, and their typing is not overwritten
    throw new Error('the cell was edited during the review; read it again');
  }
  if (edit.op === 'delete') {
    shared.deleteCell(index);
    return '';
  }
  if (p.target.type === cellType) {
    p.target.sharedModel.setSource(String(edit.source || ''));
    return p.target.id;
  }
  let id = '';
  shared.transact(() => {
    shared.deleteCell(index);
    id = shared.insertCell(index, { cell_type: cellType, source: String(edit.source || '') } as any).id;
  });
  return id;
}
