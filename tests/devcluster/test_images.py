"""devcluster/images.py: the nodes' images, built from local files into ``ctr images import`` archives. No cluster."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from devcluster import images
from devcluster.images import HostBinary, ImageError, ImageSpec

HERE = Path(images.__file__).resolve().parent
MANIFEST_GO = """
	configs[Agnhost] = Config{list.PromoterE2eRegistry, "agnhost", "2.56"}
	configs[AgnhostPrivate] = Config{list.PrivateRegistry, "agnhost", "2.6"}
	configs[BusyBox] = Config{list.PromoterE2eRegistry, "busybox", "1.37.0-1"}
	configs[Etcd] = Config{list.GcEtcdRegistry, "etcd", "3.6.4-0"}
	configs[JessieDnsutils] = Config{list.PromoterE2eRegistry, "jessie-dnsutils", "1.7"}
	configs[Pause] = Config{list.GcRegistry, "pause", "3.10.1"}
"""


@pytest.fixture
def busybox(tmp_path: Path) -> Path:
    """A stand-in for busybox-static: answers --list like the real one."""
    fake = tmp_path / "busybox"
    fake.write_text("#!/bin/sh\nprintf 'busybox\\nsh\\nls\\nrm\\nmkdir\\nwget\\n'\n")
    fake.chmod(0o755)
    return fake


@pytest.fixture
def bin_dirs(tmp_path: Path) -> dict[str, Path]:
    """A bin directory per build.sh target, each holding its binary (a few recognisable bytes)."""
    dirs = {}
    for spec in [*images.CLUSTER_IMAGES, *images.VCLUSTER_IMAGES]:
        for built in spec.binaries:
            directory = tmp_path / "bin" / built.target
            directory.mkdir(parents=True, exist_ok=True)
            (directory / built.binary).write_bytes(f"binary of {built.target}".encode())
            dirs[built.target] = directory
    return dirs


def read_archive(path: Path) -> dict[str, tuple[dict, dict[str, tarfile.TarInfo], dict[str, bytes]]]:
    """Each image of a ``docker save`` archive by tag: its config, its layer's entries and their contents."""
    result = {}
    with tarfile.open(path) as archive:
        manifest = json.loads(archive.extractfile("manifest.json").read())
        for image in manifest:
            config = json.loads(archive.extractfile(image["Config"]).read())
            (layer_name,) = image["Layers"]
            layer_bytes = archive.extractfile(layer_name).read()
            assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer_bytes).hexdigest()]
            with tarfile.open(fileobj=io.BytesIO(layer_bytes)) as layer:
                members = {member.name: member for member in layer.getmembers()}
                contents = {m.name: layer.extractfile(m).read() for m in members.values() if m.isfile()}
            (tag,) = image["RepoTags"]
            result[tag] = (config, members, contents)
    return result


def test_base_archive_is_byte_for_byte_reproducible(tmp_path: Path, busybox: Path) -> None:
    first = images.build_archive(tmp_path / "a.tar", busybox).read_bytes()
    second = images.build_archive(tmp_path / "b.tar", busybox).read_bytes()
    assert first == second


def test_base_archive_holds_the_workload_and_sandbox_images(tmp_path: Path, busybox: Path) -> None:
    found = read_archive(images.build_archive(tmp_path / "images.tar", busybox))
    assert set(found) == {images.WORKLOAD_IMAGE, images.SANDBOX_IMAGE}
    workload_config, members, contents = found[images.WORKLOAD_IMAGE]
    assert workload_config["config"]["User"] == "65534:65534"
    assert found[images.SANDBOX_IMAGE][0]["config"]["Entrypoint"] == ["/bin/sleep", "infinity"]
    assert members["bin/httpd"].issym() and members["bin/httpd"].linkname == "busybox"
    assert members["tmp"].mode == 0o1777
    assert contents["www/index.html"] == b"berth busybox\n"


def test_network_policies_image_runs_its_binary_from_bin_netpol(
    tmp_path: Path, busybox: Path, bin_dirs: dict[str, Path]
) -> None:
    spec = images.NETWORK_POLICIES
    archive = images.build_image_archive(tmp_path / "netpol.tar", spec, bin_dirs.__getitem__, busybox)
    config, members, contents = read_archive(archive)["berth.local/kube-network-policies:v0.8.0"]
    assert config["config"]["Cmd"] == ["/bin/netpol"]
    assert config["config"]["User"] == "0:0"
    assert contents["bin/netpol"] == b"binary of netpol"
    assert members["bin/netpol"].mode == 0o755
    assert members["bin/netpol"].uid == 0 and members["bin/netpol"].mtime == 0


def test_every_directory_comes_before_what_it_holds(tmp_path: Path, busybox: Path, bin_dirs: dict[str, Path]) -> None:
    spec = images.LOCAL_PATH_PROVISIONER
    archive = images.build_image_archive(tmp_path / "lp.tar", spec, bin_dirs.__getitem__, busybox)
    _, members, _ = next(iter(read_archive(archive).values()))
    seen: set[str] = set()
    for name in members:
        parent = str(Path(name).parent)
        assert parent == "." or parent in seen, f"{name} comes before its directory"
        seen.add(name)
    assert "usr/bin/local-path-provisioner" in members


def test_an_image_with_all_applets_links_every_one_of_them(
    tmp_path: Path, busybox: Path, bin_dirs: dict[str, Path]
) -> None:
    spec = images.LOCAL_PATH_PROVISIONER  # its helper pods run `sh`, `mkdir` and `rm`
    archive = images.build_image_archive(tmp_path / "lp.tar", spec, bin_dirs.__getitem__, busybox)
    _, members, _ = next(iter(read_archive(archive).values()))
    linked = {name.removeprefix("bin/") for name, member in members.items() if member.issym()}
    assert linked == {"sh", "ls", "rm", "mkdir", "wget"}


def test_build_archives_asks_only_for_the_requested_images_binaries(
    tmp_path: Path, busybox: Path, bin_dirs: dict[str, Path]
) -> None:
    asked: list[str] = []

    def bin_dir(target: str) -> Path:
        asked.append(target)
        return bin_dirs[target]

    archives = images.build_archives(tmp_path / "node", [images.COREDNS], bin_dir, busybox)
    assert asked == ["coredns"]
    assert [path.name for path in archives] == ["images.tar", images.archive_name(images.COREDNS)]
    config, _, contents = read_archive(archives[1])[images.COREDNS.tags[0]]
    assert config["config"]["Entrypoint"] == ["/coredns"]
    assert contents["coredns"] == b"binary of coredns"


def test_a_node_without_extra_images_gets_the_base_archive_alone(tmp_path: Path, busybox: Path) -> None:
    assert [path.name for path in images.build_archives(tmp_path / "node", busybox=busybox)] == ["images.tar"]


def test_a_missing_binary_names_the_build_target_that_makes_it(tmp_path: Path, busybox: Path) -> None:
    with pytest.raises(ImageError, match=r"build\.sh netpol"):
        images.build_image_archive(tmp_path / "x.tar", images.NETWORK_POLICIES, lambda _: tmp_path, busybox)


def test_a_missing_busybox_says_which_package_to_install(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="busybox-static"):
        images.build_archive(tmp_path / "x.tar", tmp_path / "no-busybox")


def test_the_e2e_suite_asks_for_our_registries_names() -> None:
    assert images.e2e_image_tags(MANIFEST_GO) == {
        "Agnhost": "berth.local/e2e-test-images/agnhost:2.56",
        "BusyBox": "berth.local/e2e-test-images/busybox:1.37.0-1",
        "JessieDnsutils": "berth.local/e2e-test-images/jessie-dnsutils:1.7",
        "Pause": "berth.local/pause:3.10.1",
    }
    assert images.e2e_repo_list() == "promoterE2eRegistry: berth.local/e2e-test-images\ngcRegistry: berth.local\n"


def test_e2e_agnhost_image_is_upstreams_shape(tmp_path: Path, busybox: Path) -> None:
    agnhost, _, busybox_spec, pause = images.e2e_images(MANIFEST_GO)
    agnhost = dataclasses.replace(agnhost, host_binaries=())  # the next tests copy host binaries
    e2e_bin = tmp_path / "e2e"
    e2e_bin.mkdir()
    (e2e_bin / "agnhost").write_bytes(b"agnhost")
    config, members, _ = read_archive(
        images.build_image_archive(tmp_path / "a.tar", agnhost, lambda _: e2e_bin, busybox)
    )["berth.local/e2e-test-images/agnhost:2.56"]
    assert (config["config"]["Entrypoint"], config["config"]["Cmd"]) == (["/agnhost"], ["pause"])
    assert members["agnhost-2"].linkname == "agnhost" and members["uploads"].isdir()
    assert busybox_spec.tags == ("berth.local/e2e-test-images/busybox:1.37.0-1",)
    assert pause.tags == ("berth.local/pause:3.10.1",) and pause.entrypoint == ("/bin/sleep", "infinity")


def test_a_manifest_without_agnhost_is_refused() -> None:
    with pytest.raises(ImageError, match="Agnhost"):
        images.e2e_images(MANIFEST_GO.replace("configs[Agnhost]", "configs[Other]"))


def test_image_tags_follow_what_build_sh_builds() -> None:
    coredns_pin = re.search(r"github.com/coredns/coredns (v\S+)", (HERE / "gobuild-coredns/go.mod").read_text())
    assert coredns_pin is not None and images.COREDNS.tags == (f"berth.local/coredns:{coredns_pin.group(1)}",)
    version = images.NETWORK_POLICIES_VERSION
    assert f"module=sigs.k8s.io/kube-network-policies version={version}" in (HERE / "build.sh").read_text()
    assert (HERE / f"patches/kube-network-policies-{version}-nfqueue-compat.patch").is_file()


def test_every_cluster_image_names_a_build_target_the_launcher_knows() -> None:
    from devcluster.launcher import TARGETS

    for spec in [*images.CLUSTER_IMAGES, *images.VCLUSTER_IMAGES]:
        for built in spec.binaries:
            assert built.binary in TARGETS[built.target][0]


def test_an_image_spec_without_a_target_needs_no_bin_dir(tmp_path: Path, busybox: Path) -> None:
    spec = ImageSpec(tags=("berth.local/plain:1",), cmd=("sh",))
    assert "berth.local/plain:1" in read_archive(images.build_image_archive(tmp_path / "p.tar", spec, None, busybox))


LDD_OUTPUT = """\tlinux-vdso.so.1 (0x00007ffd5a1f2000)
\tlibbsd.so.0 => /lib/x86_64-linux-gnu/libbsd.so.0 (0x00007fc85deb4000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007fc85dcc1000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007fc85df68000)
"""


def test_ldd_output_gives_the_libraries_and_the_interpreter_but_not_the_vdso() -> None:
    assert images.parse_ldd(LDD_OUTPUT) == [
        "/lib/x86_64-linux-gnu/libbsd.so.0",
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib64/ld-linux-x86-64.so.2",
    ]


def test_a_library_ldd_cannot_find_is_refused() -> None:
    with pytest.raises(ImageError, match=r"libmissing\.so\.1"):
        images.parse_ldd(LDD_OUTPUT + "\tlibmissing.so.1 => not found\n")


@pytest.mark.skipif(shutil.which("ldd") is None, reason="needs ldd (libc-bin)")
def test_a_host_binary_comes_with_what_it_loads_at_the_same_paths(tmp_path: Path, busybox: Path) -> None:
    # /bin/true (coreutils, essential) stands for a package's program; it replaces busybox's ls applet.
    spec = ImageSpec(tags=("berth.local/tools:1",), host_binaries=(HostBinary("bin/ls", "/bin/true", "coreutils"),))
    archive = images.build_image_archive(tmp_path / "t.tar", spec, None, busybox)
    assert images.build_image_archive(tmp_path / "again.tar", spec, None, busybox).read_bytes() == archive.read_bytes()
    _, members, contents = read_archive(archive)["berth.local/tools:1"]
    assert contents["bin/ls"] == Path("/bin/true").read_bytes() and members["bin/ls"].mode == 0o755
    loaded = images.parse_ldd(subprocess.run(["ldd", "/bin/true"], capture_output=True, text=True).stdout)
    assert any("ld-linux" in path for path in loaded)
    for path in loaded:
        assert contents[path.lstrip("/")] == Path(path).read_bytes()
        assert members[path.lstrip("/")].mtime == 0
    assert members["bin/rm"].issym()


def test_a_missing_host_binary_names_the_debian_package(tmp_path: Path, busybox: Path) -> None:
    spec = ImageSpec(tags=("berth.local/tools:1",), host_binaries=(HostBinary("bin/nc", "/no/nc", "netcat-openbsd"),))
    with pytest.raises(ImageError, match="install Debian's netcat-openbsd"):
        images.build_image_archive(tmp_path / "t.tar", spec, None, busybox)


def test_agnhost_and_jessie_run_upstreams_tools_under_a_shell_that_looks_up_path() -> None:
    agnhost, jessie, _, _ = images.e2e_images(MANIFEST_GO)
    assert jessie.tags == ("berth.local/e2e-test-images/jessie-dnsutils:1.7",)
    for spec in (agnhost, jessie):
        tools = {tool.path: tool for tool in spec.host_binaries}
        assert tools["bin/nc"].package == "netcat-openbsd"
        assert {"bin/curl", "bin/dig", "bin/getent", "bin/ip"} <= tools.keys()
        # busybox's sh would run its own nc applet whatever PATH holds.
        assert ("bin/sh", "bash") in spec.links and "bin/bash" in tools


def test_make_deps_installs_every_host_binarys_package() -> None:
    makefile = (HERE.parent / "Makefile").read_text()
    apt_packages = re.search(r"^APT_PACKAGES := ((?:.*\\\n)*.*)$", makefile, re.MULTILINE)
    assert apt_packages is not None
    listed = set(apt_packages.group(1).replace("\\\n", " ").split())
    assert {tool.package for tool in images.NETWORK_TOOLS} <= listed
