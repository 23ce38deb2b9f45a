# Sourced by the Gloo rendezvous tests: points the ranks at a file store in $dir (mode 0700)
# or, with rendezvous=tcp, at a TCP store on a free port of 127.0.0.1 served by rank 0.
if [[ $rendezvous == tcp ]]; then
  unset STRATA_RENDEZVOUS_DIR
  STRATA_MASTER_ADDR=127.0.0.1
  STRATA_MASTER_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  export STRATA_MASTER_ADDR STRATA_MASTER_PORT
else
  export STRATA_RENDEZVOUS_DIR=$dir
fi
