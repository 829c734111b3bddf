# Jupyter server settings for `make lab`, which puts this folder on JUPYTER_CONFIG_PATH (so the
# user's own ~/.jupyter stays in charge of everything else). labconfig/ beside it makes JupyterLab
# open a .py file as a notebook on double-click (jupytext's "Jupytext Notebook" viewer): the
# notebooks/NN_name.py scripts are the study's notebooks, and opening them as text would hide that.
# Jupytext itself (what a saved notebook looks like on disk) is configured in ../jupytext.toml.

c = get_config()  # noqa: F821 (provided by the config loader)

# `make setup` installs the fwbench kernel, which runs the project's .venv python by its absolute
# path (ipykernel's own "python3" runs whichever python is first on PATH). Jupytext already gives a
# notebooks/*.py the kernel whose python runs this server, fwbench; this default covers a notebook
# started from the launcher or one that names no kernel.
c.MappingKernelManager.default_kernel_name = "fwbench"

# Kernels over Unix sockets rather than loopback TCP, as the runner starts its own
# (fwbench.pipeline.runner.kernel_manager_class): over TCP every kernel (ipykernel 7.3 and later)
# warns that its traffic is unencrypted, and a kernel of this server only talks to it on this
# machine. The server names each kernel's sockets after its connection file in Jupyter's runtime
# folder, so they need no other setting.
c.KernelManager.transport = "ipc"
