/**
 * The JupyterLab plugin beside the transcript renderer: it gives the renderer the open
 * notebooks (`INotebookTracker`), so the agent's notebook tools can read the live notebook and
 * show proposed edits in place (see `notebook.ts`).
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';

import { setTracker } from './notebook';

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-session-agent:notebook-tools',
  description: 'The open notebook for the agent: read it, review its proposed cell edits.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker) => {
    setTracker(tracker, app.serviceManager.kernels);
  }
};

export default plugin;
