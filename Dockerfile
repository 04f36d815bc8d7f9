# syntax=docker/dockerfile:1
# The production image: the mcp-connect binary (demo excluded: --no-default-features) on distroless
# cc-debian12, which is glibc + libgcc + CA certificates + tzdata and nothing else (no shell, no
# package manager), running as the non-root user 65532. Why this base and not scratch+musl or
# debian-slim, with sizes: docs/deploy.md, "Container image".
#   docker build -t mcp-connect .
#   docker run --rm mcp-connect check-config --config /etc/mcp-connect/mcp-connect.toml

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# --no-default-features leaves out the `demo` feature (the development issuer and sandbox
# provider; until that feature exists the flag changes nothing). The crate registry and target/ are BuildKit caches, kept between builds (hence the
# copy out of target/). The binary is glibc-linked; Debian 12 here and in the runtime image: same glibc.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --no-default-features --bin mcp-connect \
    && cp target/release/mcp-connect /usr/local/bin/mcp-connect

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /usr/local/bin/mcp-connect /usr/local/bin/mcp-connect
# distroless "nonroot": uid/gid 65532, home /home/nonroot. Numeric, so that Kubernetes'
# runAsNonRoot can verify it.
USER 65532:65532
WORKDIR /home/nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/mcp-connect"]
CMD ["serve"]
