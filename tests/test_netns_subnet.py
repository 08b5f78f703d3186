"""The namespace hosts' choices that need no root: their /24, and what they refuse."""

import ipaddress

import pytest

from minidist.util import netns


def test_the_subnet_overlaps_no_network_of_the_machine():
    used = [ipaddress.ip_network(text) for text in
            ("127.0.0.0/8", "10.100.0.0/24", "10.100.1.7/32")]
    subnet = netns.free_subnet(used)
    assert subnet == ipaddress.ip_network("10.100.2.0/24")
    assert not any(subnet.overlaps(net) for net in used)
    assert netns.free_subnet(used, start=300) == ipaddress.ip_network("10.101.44.0/24")
    wide = [*used, ipaddress.ip_network("10.96.0.0/12")]  # 10.96 to 10.111
    assert netns.free_subnet(wide, start=300) == ipaddress.ip_network("10.112.0.0/24")


def test_no_free_subnet_is_an_error():
    with pytest.raises(RuntimeError, match="no free /24"):
        netns.free_subnet([ipaddress.ip_network("10.0.0.0/8")])


def test_bad_host_counts_are_named():
    for count in (0, 254):
        with pytest.raises(ValueError, match=f"need 1 to 253 hosts, got {count}"):
            netns.NamespaceHosts(count)
