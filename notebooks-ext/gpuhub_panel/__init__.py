"""gpuhub GPU panel: a prebuilt JupyterLab 4 extension.

The bundle lives in share/jupyter/labextensions/@gpuhub/jupyterlab-gpu-panel;
this module only tells `jupyter labextension` where it is in a development install.
"""

__version__ = "0.1.0"


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "@gpuhub/jupyterlab-gpu-panel"}]
