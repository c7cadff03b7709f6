"""Container images for the dev cluster's nodes, built here from Debian's busybox-static: no registry, no download.

One layer (busybox and its applet links, /etc/passwd, /tmp), two configs:

- ``WORKLOAD_IMAGE`` runs as nobody (65534), so it passes the restricted Pod Security level; a pod gives the
  command (``httpd -f -p 8080``, ``sleep 3600``);
- ``SANDBOX_IMAGE`` is containerd's pause image: it only holds the pod's namespaces (``sleep infinity``;
  containerd stops sandboxes with SIGKILL).

Both go into one ``docker save``-style archive that ``ctr images import`` reads; pods use them with
``imagePullPolicy: Never`` (``IfNotPresent`` works too: they are present).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static
WORKLOAD_IMAGE = "berth.local/busybox:1"
SANDBOX_IMAGE = "berth.local/pause:1"
COREDNS_IMAGE = "berth.local/coredns:v1.12.1"
LOCAL_PATH_IMAGE = "berth.local/local-path-provisioner:v0.0.30"
NETPOL_IMAGE = "berth.local/kube-network-policies:v0.8.0"
_APPLETS = (
    "sh",
    "sleep",
    "httpd",
    "cat",
    "echo",
    "ls",
    "wget",
    "id",
    "hostname",
    "env",
    "mkdir",
    "nc",
    "ps",
    "rm",
    "nslookup",
)
_EPOCH = 0  # fixed times: the same busybox gives the same layer digest


class ImageError(RuntimeError):
    """The images could not be built (busybox-static missing)."""


def _file(name: str, data: bytes, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, _EPOCH
    return info, data


def _layer(busybox: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory, mode in (("bin", 0o755), ("etc", 0o755), ("tmp", 0o1777), ("www", 0o755)):
            info = tarfile.TarInfo(directory)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, _EPOCH
            tar.addfile(info)
        info, data = _file("bin/busybox", busybox, 0o755)
        tar.addfile(info, io.BytesIO(data))
        for applet in _APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname, link.mode, link.mtime = tarfile.SYMTYPE, "busybox", 0o777, _EPOCH
            tar.addfile(link)
        for name, text in (
            ("etc/passwd", "root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n"),
            ("etc/group", "root:x:0:\nnogroup:x:65534:\n"),
            ("www/index.html", "berth busybox\n"),
        ):
            info, data = _file(name, text.encode())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _config(diff_id: str, *, user: str, entrypoint: list[str], cmd: list[str]) -> bytes:
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {"User": user, "Entrypoint": entrypoint, "Cmd": cmd, "Env": ["PATH=/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "berth devcluster/images.py"}],
    }
    return json.dumps(config, sort_keys=True).encode()


def build_archive(path: Path, busybox: Path = BUSYBOX) -> Path:
    """Write both images as one ``docker save`` archive at ``path`` and return it."""
    if not busybox.is_file():
        raise ImageError(f"{busybox} is missing: install Debian's busybox-static (make deps)")
    layer = _layer(busybox.read_bytes())
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    layer_name = f"{diff_id.removeprefix('sha256:')}/layer.tar"
    images = {
        WORKLOAD_IMAGE: _config(diff_id, user="65534:65534", entrypoint=[], cmd=["/bin/sh"]),
        SANDBOX_IMAGE: _config(diff_id, user="65535:65535", entrypoint=["/bin/sleep", "infinity"], cmd=[]),
    }
    manifest = []
    with tarfile.open(path, "w") as archive:
        info, data = _file(layer_name, layer)
        archive.addfile(info, io.BytesIO(data))
        for tag, config in images.items():
            config_name = hashlib.sha256(config).hexdigest() + ".json"
            info, data = _file(config_name, config)
            archive.addfile(info, io.BytesIO(data))
            manifest.append({"Config": config_name, "RepoTags": [tag], "Layers": [layer_name]})
        info, data = _file("manifest.json", json.dumps(manifest).encode())
        archive.addfile(info, io.BytesIO(data))
    return path
