# cdcjoin container image: a static binary on distroless.
#   docker build -t cdcjoin .
#   docker run --rm -v $PWD/cdcjoin.yaml:/etc/cdcjoin/cdcjoin.yaml cdcjoin run --config /etc/cdcjoin/cdcjoin.yaml
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# cgo for the SQL front end (pg_query_go: PostgreSQL's own parser, C); linked
# statically (pure-Go net and user lookups) so that distroless/static runs it.
RUN CGO_ENABLED=1 go build -trimpath -tags netgo,osusergo \
      -ldflags "-s -w -linkmode external -extldflags -static -X main.version=${VERSION}" -o /out/cdcjoin ./cmd/cdcjoin \
 && mkdir -p /out/var/lib/cdcjoin

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/cdcjoin /usr/local/bin/cdcjoin
# The join state (pebble); mount a volume here. Owned by distroless's
# nonroot user (65532), which a fresh named volume inherits.
COPY --from=build --chown=65532:65532 /out/var/lib/cdcjoin /var/lib/cdcjoin
VOLUME /var/lib/cdcjoin
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/cdcjoin"]
CMD ["help"]
