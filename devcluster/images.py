"""Container images for the dev cluster's nodes, built here: no registry, no download.

Each image is one layer in a ``docker save``-style archive that ``ctr images import`` reads; pods use them with
``imagePullPolicy: Never`` (``IfNotPresent`` works too: they are present). Archives are deterministic: the same
inputs give the same bytes, so the same layer and image digests.

``build_archive`` writes the two images every node needs, from Debian's busybox-static (busybox and its applet
links, /etc/passwd, /tmp):

- ``WORKLOAD_IMAGE`` runs as nobody (65534), so it passes the restricted Pod Security level; a pod gives the
  command (``httpd -f -p 8080``, ``sleep 3600``);
- ``SANDBOX_IMAGE`` is containerd's pause image: it only holds the pod's namespaces (``sleep infinity``;
  containerd stops sandboxes with SIGKILL).

``build_archives`` adds one archive per requested ``ImageSpec``: the cluster's components (``COREDNS``,
``LOCAL_PATH_PROVISIONER``, ``NETWORK_POLICIES``), each a static binary from ``devcluster/build.sh`` (found
through a callable such as ``launcher.find_bin_dir``, asked only for the images requested), and the images the
upstream e2e suite asks for (``e2e_images``) under the registries ``e2e_repo_list`` names.

An image may also carry programs from Debian packages installed here (``HostBinary``): each comes with its ELF
interpreter and every shared library ``ldd`` says it loads, at the same absolute paths, so it runs as on the host.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static
WORKLOAD_IMAGE = "berth.local/busybox:1"
SANDBOX_IMAGE = "berth.local/pause:1"
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
_PASSWD = "root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n"
_GROUP = "root:x:0:\nnogroup:x:65534:\n"
_HERE = Path(__file__).resolve().parent


class ImageError(RuntimeError):
    """The images could not be built (busybox-static, a binary or a library missing)."""


def _pinned(module_dir: str, module: str) -> str:
    """The version of ``module`` that devcluster/<module_dir>/go.mod requires (what build.sh builds)."""
    text = (_HERE / module_dir / "go.mod").read_text()
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.MULTILINE)
    if match is None:
        raise ImageError(f"devcluster/{module_dir}/go.mod does not require {module}")
    return match.group(1)


@dataclass(frozen=True)
class HostBinary:
    """A dynamically linked program from a Debian package installed here (``make deps``), copied into an image."""

    path: str  # where it goes in the image, relative to /; it replaces a busybox applet of the same name
    source: str  # the program on this machine, as the package installs it
    package: str  # the Debian package that installs it, named when it is missing


@dataclass(frozen=True)
class Built:
    """A static binary that a build.sh target builds, and where it goes in an image."""

    target: str  # the build.sh target (launcher.TARGETS)
    binary: str  # its file name in the target's bin directory
    path: str  # where it goes in the image, relative to /


@dataclass(frozen=True)
class ImageSpec:
    """One single-layer image: busybox-static and the binaries of build.sh targets (``binaries``)."""

    tags: tuple[str, ...]
    binaries: tuple[Built, ...] = ()
    all_applets: bool = False  # link every busybox applet in /bin, not only the base set
    links: tuple[tuple[str, str], ...] = ()  # (path, target) symlinks
    directories: tuple[str, ...] = ()  # extra empty directories (0755)
    texts: tuple[tuple[str, str], ...] = ()  # (path, content) small files (0644)
    host_binaries: tuple[HostBinary, ...] = ()  # with their interpreter and libraries
    passwd: str = _PASSWD
    group: str = _GROUP
    user: str = "0:0"
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()


# CoreDNS's image puts the binary at /coredns and runs it as its entrypoint (a Deployment gives `-conf ...`). It
# runs as root here: upstream's runs as nonroot with a file capability to bind port 53, which this layer does not
# carry; root with only NET_BIND_SERVICE (kubeadm's Deployment drops the rest) binds it.
COREDNS = ImageSpec(
    tags=(f"berth.local/coredns:{_pinned('gobuild-coredns', 'github.com/coredns/coredns')}",),
    binaries=(Built("coredns", "coredns", "coredns"),),
    entrypoint=("/coredns",),
)
# Upstream's image is Alpine's: the provisioner's helper pods run its ConfigMap's setup and teardown scripts
# (`sh`, `mkdir -m 0777 -p`, `rm -rf`) as root, so this image can be their helper image too.
_LOCAL_PATH_MODULE = "github.com/rancher/local-path-provisioner"
LOCAL_PATH_PROVISIONER = ImageSpec(
    tags=(f"berth.local/local-path-provisioner:{_pinned('gobuild-local-path', _LOCAL_PATH_MODULE)}",),
    binaries=(Built("local-path", "local-path-provisioner", "usr/bin/local-path-provisioner"),),
    all_applets=True,
    cmd=("local-path-provisioner",),
)
NETWORK_POLICIES_VERSION = "v0.8.0"  # build.sh build_netpol's pin
NETWORK_POLICIES = ImageSpec(
    tags=(f"berth.local/kube-network-policies:{NETWORK_POLICIES_VERSION}",),
    binaries=(Built("netpol", "netpol", "bin/netpol"),),
    cmd=("/bin/netpol",),
)
CLUSTER_IMAGES = (COREDNS, LOCAL_PATH_PROVISIONER, NETWORK_POLICIES)

# vcluster's images (the vendored chart 0.30.0), under the registry a dev cluster's vcluster settings give as
# image_registry (the chart's controlPlane.advanced.defaultImageRegistry), with upstream's repository names, so
# the chart and the syncer ask for them by the names they would use anyway:
VCLUSTER_REGISTRY = "berth.local"
VCLUSTER_VERSION = _pinned("gobuild-vcluster", "github.com/loft-sh/vcluster").removeprefix("v")
# The release of the vclusters' own control plane: devcluster/gobuild's pin (build.sh virtual-kubernetes), the one
# vcluster v0.30 supports, also while the host cluster runs another (K8S_VERSION).
KUBERNETES_VERSION = _pinned("gobuild", "k8s.io/kubernetes")
# - the control plane, as vcluster's release image (Dockerfile.release) holds it: /vcluster (`vcluster start`),
#   kine for its embedded SQLite store and helm. It is the open-source build, hence upstream's name vcluster-oss
#   (the chart's default, vcluster-pro, adds modules that are off unless licensed).
VCLUSTER_SYNCER_IMAGE = f"loft-sh/vcluster-oss:{VCLUSTER_VERSION}"
VCLUSTER_SYNCER = ImageSpec(
    tags=(f"{VCLUSTER_REGISTRY}/{VCLUSTER_SYNCER_IMAGE}",),
    binaries=(
        Built("vcluster", "vcluster", "vcluster"),
        Built("kine", "kine", "usr/local/bin/kine"),
        Built("helm", "helm", "usr/local/bin/helm"),
    ),
    all_applets=True,
    entrypoint=("/vcluster", "start"),
)
# - the k8s distro's binaries, which the control plane's init container copies (`cp -r /kubernetes/. /binaries/`):
#   the project's own Kubernetes build;
VCLUSTER_KUBERNETES_IMAGE = f"loft-sh/kubernetes:{KUBERNETES_VERSION}"
VCLUSTER_KUBERNETES = ImageSpec(
    tags=(f"{VCLUSTER_REGISTRY}/{VCLUSTER_KUBERNETES_IMAGE}",),
    binaries=tuple(
        Built("virtual-kubernetes", name, f"kubernetes/{name}")
        for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
    ),
    all_applets=True,
    cmd=("sh",),
)
# - the virtual cluster's DNS, which the syncer deploys as coredns/coredns:<version for the Kubernetes minor>
#   (pkg/constants/coredns.go: 1.12.1 for 1.34), the same build as the host's;
VCLUSTER_COREDNS = ImageSpec(
    tags=(f"{VCLUSTER_REGISTRY}/coredns/coredns:{COREDNS.tags[0].rsplit(':v', 1)[1]}",),
    binaries=COREDNS.binaries,
    entrypoint=COREDNS.entrypoint,
)
# - the shell the syncer's init container runs in synced StatefulSet pods to rewrite /etc/hosts (`sh -c 'sed
#   ...'`), upstream's library/alpine:3.20 (sync.toHost.pods.rewriteHosts).
VCLUSTER_HOSTS_REWRITER = ImageSpec(tags=(f"{VCLUSTER_REGISTRY}/library/alpine:3.20",), all_applets=True, cmd=("sh",))
VCLUSTER_IMAGES = (VCLUSTER_SYNCER, VCLUSTER_KUBERNETES, VCLUSTER_COREDNS, VCLUSTER_HOSTS_REWRITER)

# The e2e suite's images (k8s.io/kubernetes test/utils/image/manifest.go) under registries of ours: with
# KUBE_TEST_REPO_LIST naming a file holding e2e_repo_list(), it asks for berth.local/e2e-test-images/<name>:<tag>
# and berth.local/pause:<tag>.
E2E_REGISTRY = "berth.local"
_E2E_REGISTRIES = {"promoterE2eRegistry": f"{E2E_REGISTRY}/e2e-test-images", "gcRegistry": E2E_REGISTRY}
_E2E_MANIFEST_LINE = re.compile(r'configs\[(\w+)\] = Config\{list\.(\w+), "([^"]+)", "([^"]+)"\}')


E2E_MANIFEST = "image-manifest.go"  # build.sh e2e copies the suite's manifest.go beside e2e.test under this name


def e2e_repo_list() -> str:
    """The YAML for KUBE_TEST_REPO_LIST: the e2e suite's registries that we serve images for, mapped to ours."""
    return "".join(f"{field}: {registry}\n" for field, registry in _E2E_REGISTRIES.items())


def e2e_image_tags(manifest: str) -> dict[str, str]:
    """The name the e2e suite asks for, by image id (Agnhost, BusyBox, Pause...), under ``e2e_repo_list``'s
    registries, read from the suite's test/utils/image/manifest.go (``E2E_MANIFEST`` in build.sh e2e's directory).
    ``e2e.test --list-images`` with KUBE_TEST_REPO_LIST set prints the same names."""
    tags = {}
    for image_id, registry_field, name, version in _E2E_MANIFEST_LINE.findall(manifest):
        # The Go field (PromoterE2eRegistry) and its yaml key in the repo list (promoterE2eRegistry).
        yaml_key = registry_field[0].lower() + registry_field[1:]
        if yaml_key in _E2E_REGISTRIES and image_id not in tags:
            tags[image_id] = f"{_E2E_REGISTRIES[yaml_key]}/{name}:{version}"
    return tags


# What the e2e network tests exec in agnhost and jessie-dnsutils besides agnhost itself. Upstream's agnhost is
# Alpine with bind-tools, curl, netcat-openbsd, iproute2 and bash, jessie-dnsutils Debian with dnsutils. Busybox's
# nc refuses the options the Services tests give it (`nc -v -t -w 2 host port`), and busybox has neither dig nor
# getent, which the DNS tests' probes run.
NETWORK_TOOLS = (
    HostBinary("bin/nc", "/bin/nc.openbsd", "netcat-openbsd"),
    HostBinary("bin/curl", "/usr/bin/curl", "curl"),
    HostBinary("bin/dig", "/usr/bin/dig", "bind9-dnsutils"),
    HostBinary("bin/nslookup", "/usr/bin/nslookup", "bind9-dnsutils"),
    HostBinary("bin/host", "/usr/bin/host", "bind9-dnsutils"),
    HostBinary("bin/getent", "/usr/bin/getent", "libc-bin"),
    HostBinary("bin/ip", "/bin/ip", "iproute2"),
    HostBinary("bin/bash", "/bin/bash", "bash"),
)
# sh is bash: Debian's busybox-static shell runs its own applet for any name it has (nc, ip, nslookup) before it
# looks at PATH, so under busybox's sh `nc` would never be netcat-openbsd.
_BASH_AS_SH = ("bin/sh", "bash")
# /etc/hosts first, as Alpine's musl and Debian's nsswitch.conf do (glibc's default without the file asks DNS first).
_NSSWITCH = ("etc/nsswitch.conf", "hosts: files dns\n")
_E2E_NEEDED = ("Agnhost", "BusyBox", "JessieDnsutils", "Pause")


def e2e_images(manifest: str) -> tuple[ImageSpec, ...]:
    """The e2e suite's agnhost (our build of its binary, with upstream's network tools and busybox for the rest),
    jessie-dnsutils (the same tools), busybox and pause, from what ``manifest`` (the suite's manifest.go) says it
    asks for."""
    tags = e2e_image_tags(manifest)
    missing = set(_E2E_NEEDED) - tags.keys()
    if missing:
        raise ImageError(f"the e2e image manifest names no {', '.join(sorted(missing))}")
    agnhost = ImageSpec(
        tags=(tags["Agnhost"],),
        binaries=(Built("e2e", "agnhost", "agnhost"),),
        all_applets=True,
        host_binaries=NETWORK_TOOLS,
        # As upstream's: agnhost-2 for the entrypoint tests, /uploads for netexec, a user and group in the image.
        links=(("agnhost-2", "agnhost"), _BASH_AS_SH),
        directories=("uploads",),
        texts=(_NSSWITCH,),
        passwd=_PASSWD + "user-defined-in-image:x:1000:1000::/:/bin/sh\n",
        group=_GROUP + "user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n",
        entrypoint=("/agnhost",),
        cmd=("pause",),
    )
    # The DNS tests' second prober (`sh -c 'dig ...; getent hosts ...'`), upstream a Debian image.
    jessie = ImageSpec(
        tags=(tags["JessieDnsutils"],),
        all_applets=True,
        host_binaries=NETWORK_TOOLS,
        links=(_BASH_AS_SH,),
        texts=(_NSSWITCH,),
        cmd=("sh",),
    )
    busybox = ImageSpec(tags=(tags["BusyBox"],), all_applets=True, cmd=("sh",))
    pause = ImageSpec(
        tags=(tags["Pause"],), all_applets=True, user="65535:65535", entrypoint=("/bin/sleep", "infinity")
    )
    return agnhost, jessie, busybox, pause


def _add(
    tar: tarfile.TarFile,
    name: str,
    *,
    data: bytes | Path = b"",
    mode: int = 0o644,
    kind: bytes = tarfile.REGTYPE,
    link: str = "",
) -> None:
    """Adds one entry with fixed times and owners (root), reading a file's content from ``data`` if a Path."""
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime, info.linkname = kind, mode, _EPOCH, link
    if kind != tarfile.REGTYPE:
        tar.addfile(info)
    elif isinstance(data, Path):
        info.size = data.stat().st_size
        with data.open("rb") as content:
            tar.addfile(info, content)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def _applets(busybox: Path) -> list[str]:
    listed = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout
    return sorted(set(listed.split()) - {"busybox"})


def parse_ldd(output: str) -> list[str]:
    """The absolute paths of the interpreter and libraries in ``ldd``'s output, in its order; the vDSO, which the
    kernel provides, is left out. A library ``ldd`` could not find is an error."""
    paths = []
    for line in output.splitlines():
        name, _, found = line.strip().partition(" => ")
        if found.startswith("not found"):
            raise ImageError(f"ldd finds no {name}")
        path = (found or name).split(" (", 1)[0].strip()
        if path.startswith("/"):
            paths.append(path)
    return paths


def _shared_libraries(program: Path) -> list[str]:
    """What ``program`` loads at start: its ELF interpreter and shared libraries (none if it is static)."""
    run = subprocess.run(["ldd", str(program)], capture_output=True, text=True, check=False)
    if run.returncode != 0:
        if "not a dynamic executable" in run.stdout + run.stderr:
            return []
        raise ImageError(f"ldd {program} failed: {(run.stderr or run.stdout).strip()}")
    try:
        return parse_ldd(run.stdout)
    except ImageError as error:
        raise ImageError(f"{program}: {error}") from None


def _host_files(spec: ImageSpec) -> dict[str, Path]:
    """``spec``'s host binaries and what they load, by path in the image. A library keeps its absolute path (the
    loader and the binaries' RUNPATHs look there); its content is the file the host's path resolves to."""
    files = {}
    for program in spec.host_binaries:
        source = Path(program.source)
        if not source.is_file():
            raise ImageError(f"{source} is missing: install Debian's {program.package} (make deps)")
        files[program.path] = source
        for library in _shared_libraries(source):
            files.setdefault(library.lstrip("/"), Path(library))
    return files


def _write_layer(
    out: BinaryIO, spec: ImageSpec, busybox: Path, binaries: dict[str, Path], host_files: dict[str, Path]
) -> None:
    """Writes ``spec``'s layer; directories come before what they hold, everything sorted, so it is reproducible."""
    applets = _applets(busybox) if spec.all_applets else list(_APPLETS)
    files: dict[str, tuple[Path | bytes, int]] = {
        "bin/busybox": (busybox, 0o755),
        "etc/passwd": (spec.passwd.encode(), 0o644),
        "etc/group": (spec.group.encode(), 0o644),
    }
    files.update({name: (text.encode(), 0o644) for name, text in spec.texts})
    files.update({name: (source, 0o755) for name, source in host_files.items()})
    files.update({name: (source, 0o755) for name, source in binaries.items()})
    links = {f"bin/{applet}": "busybox" for applet in applets if f"bin/{applet}" not in files}
    links.update(dict(spec.links))
    directories = {"tmp": 0o1777, "bin": 0o755, "etc": 0o755}
    for name in [*files, *links, *spec.directories]:
        parent = str(Path(name).parent)
        while parent != ".":
            directories.setdefault(parent, 0o755)
            parent = str(Path(parent).parent)
    directories.update(dict.fromkeys(spec.directories, 0o755))
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in sorted(directories):
            _add(tar, directory, mode=directories[directory], kind=tarfile.DIRTYPE)
        for name in sorted(files):
            source, mode = files[name]
            _add(tar, name, data=source, mode=mode)
        for name in sorted(links):
            _add(tar, name, mode=0o777, kind=tarfile.SYMTYPE, link=links[name])


def _config(diff_id: str, *, user: str, entrypoint: Iterable[str], cmd: Iterable[str]) -> bytes:
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {
            "User": user,
            "Entrypoint": list(entrypoint),
            "Cmd": list(cmd),
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "berth devcluster/images.py"}],
    }
    return json.dumps(config, sort_keys=True).encode()


def _write_archive(path: Path, layer: Path, configs: dict[str, bytes]) -> Path:
    """One ``docker save`` archive at ``path``: ``layer`` and one image per tag, each with its config."""
    diff_id = _sha256(layer)
    layer_name = f"{diff_id.removeprefix('sha256:')}/layer.tar"
    manifest = []
    with tarfile.open(path, "w") as archive:
        _add(archive, layer_name, data=layer)
        for tag, config in configs.items():
            config_name = hashlib.sha256(config).hexdigest() + ".json"
            _add(archive, config_name, data=config)
            manifest.append({"Config": config_name, "RepoTags": [tag], "Layers": [layer_name]})
        _add(archive, "manifest.json", data=json.dumps(manifest).encode())
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for chunk in iter(lambda: data.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _build(
    path: Path,
    spec: ImageSpec,
    busybox: Path,
    bin_dir: Callable[[str], Path] | None,
    configs: Callable[[str], dict[str, bytes]],
) -> Path:
    if not busybox.is_file():
        raise ImageError(f"{busybox} is missing: install Debian's busybox-static (make deps)")
    binaries = {}
    for built in spec.binaries:
        if bin_dir is None:
            raise ImageError(f"{spec.tags[0]} needs the directory devcluster/build.sh {built.target} builds into")
        binary = bin_dir(built.target) / built.binary
        if not binary.is_file():
            raise ImageError(f"{binary} is missing: devcluster/build.sh {built.target} builds it")
        binaries[built.path] = binary
    host_files = _host_files(spec)
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        layer = Path(scratch) / "layer.tar"
        with layer.open("wb") as out:
            _write_layer(out, spec, busybox, binaries, host_files)
        return _write_archive(path, layer, configs(_sha256(layer)))


def build_archive(path: Path, busybox: Path = BUSYBOX) -> Path:
    """Write ``WORKLOAD_IMAGE`` and ``SANDBOX_IMAGE`` as one ``docker save`` archive at ``path`` and return it."""
    base = ImageSpec(tags=(WORKLOAD_IMAGE, SANDBOX_IMAGE), texts=(("www/index.html", "berth busybox\n"),))
    return _build(
        path,
        base,
        busybox,
        None,
        lambda diff_id: {
            WORKLOAD_IMAGE: _config(diff_id, user="65534:65534", entrypoint=[], cmd=["/bin/sh"]),
            SANDBOX_IMAGE: _config(diff_id, user="65535:65535", entrypoint=["/bin/sleep", "infinity"], cmd=[]),
        },
    )


def build_image_archive(
    path: Path, spec: ImageSpec, bin_dir: Callable[[str], Path] | None = None, busybox: Path = BUSYBOX
) -> Path:
    """Write ``spec``'s image as a ``docker save`` archive at ``path``; ``bin_dir(target)`` names the directory
    holding a build.sh target's binaries (asked only for the targets of ``spec.binaries``)."""
    return _build(
        path,
        spec,
        busybox,
        bin_dir,
        lambda diff_id: {
            tag: _config(diff_id, user=spec.user, entrypoint=spec.entrypoint, cmd=spec.cmd) for tag in spec.tags
        },
    )


def archive_name(spec: ImageSpec) -> str:
    """A file name for ``spec``'s archive: its first tag, with what a file name cannot hold replaced."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", spec.tags[0]) + ".tar"


def build_archives(
    directory: Path,
    specs: Iterable[ImageSpec] = (),
    bin_dir: Callable[[str], Path] | None = None,
    busybox: Path = BUSYBOX,
) -> list[Path]:
    """The archives a node imports (``ctr images import``, one by one): ``build_archive``'s, then one per spec, in
    ``directory``. ``bin_dir(target)`` names the directory holding a build.sh target's binaries (for instance
    ``launcher.find_bin_dir``, which builds on first use); it is asked only for the targets of ``specs``."""
    directory.mkdir(parents=True, exist_ok=True)
    archives = [build_archive(directory / "images.tar", busybox)]
    for spec in specs:
        archives.append(build_image_archive(directory / archive_name(spec), spec, bin_dir, busybox))
    return archives
