"""cpu_topology: the CPU facts Eigen's f64 dot order depends on, and that cache keys include them."""
from tfxla_cluster import cpu_topology


def test_sizes_parse_as_sysfs_writes_them():
    assert cpu_topology._size("32K\n") == 32 << 10
    assert cpu_topology._size("32768K") == 32 << 20
    assert cpu_topology._size("2M") == 2 << 20
    assert cpu_topology._size("unknown") is None


def test_cache_sizes_and_threads_are_the_hosts():
    l1, l2, l3 = cpu_topology.cache_sizes()
    assert 0 < l1 < l2 <= l3
    assert cpu_topology.eigen_threads() >= 1


def test_compile_cache_keys_depend_on_them():
    from tfxla_cluster.runtime import compile_cache

    assert cpu_topology.key() in compile_cache._environment_key(None)
