package main

import (
	"context"
	"errors"
)

// newDockerCluster attaches to the docker-compose cluster.
func newDockerCluster(ctx context.Context, cfg config, logln func(string, ...any)) (Cluster, error) {
	return nil, errors.New("docker mode: not implemented yet")
}
