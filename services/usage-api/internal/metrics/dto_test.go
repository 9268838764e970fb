package metrics

import dtopb "github.com/prometheus/client_model/go"

type dto = dtopb.MetricFamily
