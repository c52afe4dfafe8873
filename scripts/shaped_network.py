"""The network of scripts/bench-netns and scripts/chaos: one network namespace per rank, each
joined to one bridge by a veth pair whose two ends are shaped with tc (both directions), so that
ranks on one machine talk over a link of a chosen rate, and a rank's link can be cut while a job
runs. Needs root."""
import subprocess

SUBNET = "10.231.0"


def sh(*command, check=True):
    done = subprocess.run(command, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip() or 'failed'}")
    return done


class shaped_network:
    """One namespace per rank behind a tc-shaped veth (a token bucket), all on one bridge;
    removed on exit."""

    def __init__(self, workers, rate, prefix):
        self.workers, self.prefix = workers, prefix
        self.bridge = f"{prefix}-br"
        self.cleanup()  # leftovers of an interrupted run
        try:
            sh("ip", "link", "add", self.bridge, "type", "bridge")
            sh("ip", "link", "set", self.bridge, "up")
            for rank in range(workers):
                ns, host_end, ns_end = self.names(rank)
                sh("ip", "netns", "add", ns)
                sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end)
                sh("ip", "link", "set", ns_end, "netns", ns)
                sh("ip", "link", "set", host_end, "master", self.bridge)
                sh("ip", "link", "set", host_end, "up")
                sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.address(rank)}/24", "dev", ns_end)
                sh("ip", "netns", "exec", ns, "ip", "link", "set", ns_end, "up")
                sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            self.set_rate(rate, "add")
        except RuntimeError as e:
            self.cleanup()
            raise RuntimeError(f"cannot build the shaped network (root, network namespaces and tc's tbf are "
                               f"needed): {e}")

    def set_rate(self, rate, verb="change"):
        for rank in range(self.workers):
            ns, host_end, ns_end = self.names(rank)
            # Upload (leaving the namespace) and download (leaving the bridge towards it).
            shape = ["root", "tbf", "rate", rate, "burst", "64kb", "latency", "200ms"]
            sh("ip", "netns", "exec", ns, "tc", "qdisc", verb, "dev", ns_end, *shape)
            sh("tc", "qdisc", verb, "dev", host_end, *shape)

    def connect(self, rank, up):
        """Cuts rank's link (a partition of it from the others) or restores it."""
        _, host_end, _ = self.names(rank)
        sh("ip", "link", "set", host_end, "up" if up else "down")

    def names(self, rank):
        return f"{self.prefix}{rank}", f"{self.prefix}{rank}h", f"{self.prefix}{rank}n"

    @staticmethod
    def address(rank):
        return f"{SUBNET}.{rank + 1}"

    def cleanup(self):
        for line in sh("ip", "netns", "list", check=False).stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(self.prefix):
                sh("ip", "netns", "del", name, check=False)
        # A killed rank's orphaned TCP sockets keep its namespace, and so its veth pair, alive
        # for minutes after the name is gone: the host ends go explicitly (the pairs with them).
        for line in sh("ip", "-o", "link", "show", check=False).stdout.splitlines():
            fields = line.split(":")
            name = fields[1].strip().split("@")[0] if len(fields) > 1 else ""
            if name.startswith(self.prefix) and name != self.bridge:
                sh("ip", "link", "del", name, check=False)
        sh("ip", "link", "del", self.bridge, check=False)


