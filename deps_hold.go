//go:build depshold

package gpuhub

import (
	_ "github.com/NVIDIA/go-nvml/pkg/nvml"
	_ "github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	_ "github.com/golang-jwt/jwt/v5"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/gorilla/mux"
	_ "github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/prometheus/common/expfmt"
	_ "gopkg.in/yaml.v3"
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "modernc.org/sqlite"
)
