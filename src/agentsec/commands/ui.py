"""``agentsec ui``: the saved runs in a browser, on this machine only unless told otherwise."""

from __future__ import annotations

import signal
import webbrowser
from pathlib import Path

import click

from agentsec.errors import AgentsecError


@click.command("ui")
@click.option("--results", type=click.Path(path_type=Path, file_okay=False),
              default=Path("reports"), show_default=True,
              help="The reports directory to show (and where console runs are saved).")
@click.option("--bind", default="127.0.0.1", show_default=True,
              help="Address to listen on. Off loopback the console is read-only unless "
                   "--allow-remote-runs.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port (0: any free port).")
@click.option("--allow-remote-runs", is_flag=True,
              help="Let browsers on other machines start runs (with --bind off loopback).")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="Another host name browsers may use to reach the console (repeatable).")
@click.option("--open", "open_browser", is_flag=True, help="Open the console in a browser.")
def command(results: Path, bind: str, port: int, allow_remote_runs: bool,
            allow_hosts: tuple[str, ...], open_browser: bool) -> None:
    """The report page served live from --results, with history and shipped-preset runs."""
    from agentsec.ui.server import make_server  # the server is loaded only for this command

    try:
        server = make_server(bind, port, results, allow_remote_runs, allow_hosts)
    except OSError as exc:
        raise AgentsecError(f"cannot listen on {bind}:{port}: {exc.strerror or exc}") from exc
    guard = server.state.guard
    host = f"[{bind}]" if ":" in bind else bind
    url = f"http://{host}:{guard.port}/?token={guard.token}"
    mode = "runs allowed" if guard.runs_allowed else "read-only"
    click.echo(f"agentsec console ({mode}): {url}", err=False)
    click.echo("the address carries this session's token: do not share it; Ctrl-C stops",
               err=True)

    def stop(signum, frame):  # SIGTERM stops like Ctrl-C
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    if open_browser:
        webbrowser.open(url)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        click.echo("agentsec console stopped", err=True)
    finally:
        server.server_close()
