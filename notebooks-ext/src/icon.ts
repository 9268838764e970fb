import { LabIcon } from '@jupyterlab/ui-components';

// A chip outline; `jp-icon3` makes JupyterLab recolour it for light and dark themes.
const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M9 2h2v2h2V2h2v2h2a2 2 0 0 1 2 2v2h2v2h-2v2h2v2h-2v2a2 2 0 0 1-2 2h-2v2h-2v-2h-2v2H9v-2H7a2 2 0 0 1-2-2v-2H3v-2h2v-2H3V8h2V6a2 2 0 0 1 2-2h2V2zm-2 4v12h10V6H7zm2 2h6v8H9V8zm2 2v4h2v-4h-2z"/>
  </g>
</svg>`;

export const gpuIcon = new LabIcon({
  name: '@gpuhub/jupyterlab-gpu-panel:gpu',
  svgstr: svg
});
