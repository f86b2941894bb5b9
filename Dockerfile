# loadterm image: the binary built in a Rust image, run from a slim Debian one as a non-root
# user. Build with `docker build -t loadterm .` at the top of the repository.
# Not built by CI (no registry to pull the base images from there): linted with hadolint
# (crates/cli/tests/deploy.rs); see docs/DISTRIBUTED.md.

FROM rust:1.88-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p loadterm \
    && install -D -m 0755 target/release/loadterm /out/loadterm

FROM debian:bookworm-slim
# The system CA bundle, for https targets verified without --cacert. Not version-pinned: the
# security updates of the stable release are wanted.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/loadterm /usr/local/bin/loadterm
# A fixed numeric non-root user, so that Kubernetes' runAsNonRoot can check it.
USER 65532:65532
ENTRYPOINT ["loadterm"]
CMD ["--help"]
