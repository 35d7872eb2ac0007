import panstream as ps


def test_api_names_exist() -> None:
    est = ps.DensityEstimator(ps.Universe.ipv4("10.0.0.0/16"), epsilon=1.0, calibration="tight")
    assert est.universe.size == 1 << 16
    assert est.bits().shape == (1 << 16,)
    assert est.epsilon_state <= 1.0
