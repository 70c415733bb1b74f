# cairn's container image: the two static binaries on an empty base.
#
# It pulls nothing, so it builds on a machine without registry access. The
# binaries are built on the host first, into a build context of their own:
#
#   make docker                                 # = deploy/build-image.sh cairn:latest
#
# which runs (see deploy/build-image.sh)
#
#   CGO_ENABLED=0 go build -trimpath -o deploy/.build/image/cairn-node ./cmd/node
#   CGO_ENABLED=0 go build -trimpath -o deploy/.build/image/cairn      ./cmd/client
#   mkdir deploy/.build/image/empty
#   docker build -f Dockerfile -t cairn:latest deploy/.build/image
#
# (deploy/Dockerfile.source is a multi-stage variant that compiles inside a
# golang image, for machines that can pull one.)
#
# Running it:
#
#   docker run -d -p 127.0.0.1:7379:7379 -v cairn-data:/data cairn:latest    # a single-node cluster
#   docker run --rm --network host --entrypoint cairn cairn:latest status    # the CLI
#
# docker-compose.yml starts a three-node cluster from this image.
#
# The image is only compatible with the legacy builder's features (no
# BuildKit syntax): Docker 20.10 without buildx must build it.
FROM scratch

# /data (the volume) and /tmp must exist and belong to the non-root user:
# scratch has no mkdir, so they are copies of an empty directory. A named
# volume mounted on /data starts as a copy of the image's /data, ownership
# included. /certs is where docker-compose.tls.yml's volume of certificates
# goes (`cairn-node certs` writes it as this user).
COPY --chown=65532:65532 empty /data
COPY --chown=65532:65532 empty /tmp
COPY --chown=65532:65532 empty /certs
COPY cairn-node cairn /usr/local/bin/

ENV PATH=/usr/local/bin
# 65532 is the conventional "nonroot" ID of distroless images; scratch has
# no /etc/passwd, so it has no name.
USER 65532:65532
WORKDIR /data
VOLUME /data

# gRPC (clients and forwarding between nodes), raft, gossip (TCP and UDP).
EXPOSE 7379/tcp 7380/tcp 7381/tcp 7381/udp

# The binary checks itself: scratch has no shell, curl or grpc_health_probe.
HEALTHCHECK --interval=5s --timeout=4s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/cairn-node", "health", "--grpc-addr", "127.0.0.1:7379", "--timeout", "3s"]

ENTRYPOINT ["/usr/local/bin/cairn-node"]
# Without arguments: a single-node cluster serving on every interface, its
# data in the volume. Advertised addresses default to the container's IP.
CMD ["--data-dir=/data", "--grpc-addr=0.0.0.0:7379", "--raft-addr=0.0.0.0:7380", "--gossip-addr=0.0.0.0:7381"]
