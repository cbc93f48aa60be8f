#!/usr/bin/env python3
"""Loopback S3 (moto) for insitubatch-rs end-to-end tests.

Starts moto's ThreadedMotoServer on 127.0.0.1 (free port), creates BUCKET, uploads
every file under ROOT with its relative path as key, writes http://127.0.0.1:PORT
to --port-file when ready (`-`: as the first line of stdout, which then goes to stderr),
and serves until SIGTERM/SIGINT.

Credentials: AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing, us-east-1; moto
accepts any signature.

With --auth, moto checks every request's signature (SigV4) after the first three actions,
which create an IAM user with an access key allowed everything; the fixtures are uploaded with
that key, and the ready line is `URL ACCESS_KEY_ID SECRET_ACCESS_KEY`. --only PREFIX uploads
only the files under ROOT/PREFIX.

The bucket answers CORS (any origin, GET and HEAD, any request header; ETag and Content-Range
exposed), so pages can read it with signed requests.
"""
import argparse
import os
import signal
import socket
import sys
import threading

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_REGION", "us-east-1")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def signed_user(boto3, url):
    """An IAM user allowed everything, and its access key (the three unchecked actions)."""
    import json

    iam = boto3.client("iam", endpoint_url=url, region_name="us-east-1",
                       aws_access_key_id="setup", aws_secret_access_key="setup")
    iam.create_user(UserName="reader")
    key = iam.create_access_key(UserName="reader")["AccessKey"]
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    iam.put_user_policy(UserName="reader", PolicyName="all", PolicyDocument=json.dumps(policy))
    return key["AccessKeyId"], key["SecretAccessKey"]


def answer_preflights_unsigned():
    """S3 answers a CORS preflight (OPTIONS) without credentials, since a browser sends none;
    moto refuses an unsigned request for a key (and checks the signature of a preflight once
    auth is on). Its answer here is moto's own, less those checks."""
    from moto.s3.exceptions import MissingBucket
    from moto.s3.responses import S3Response

    def options(self, headers, bucket_name):
        try:
            bucket = self.backend.head_bucket(bucket_name)
        except MissingBucket:
            return 403, {}, ""
        self._set_cors_headers_options(headers, bucket)
        return 200, self.response_headers, ""

    key_response = S3Response._key_response

    def key_preflight(self, request, full_url):
        if request.method == "OPTIONS":  # before moto's check of an unsigned read of a key
            return options(self, request.headers, self.parse_bucket_name_from_url(request, full_url))
        return key_response(self, request, full_url)

    S3Response._response_options = options
    S3Response._key_response = key_preflight


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", required=True)
    ap.add_argument("--bucket", default="fixtures")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--auth", action="store_true")
    ap.add_argument("--only", default="")
    args = ap.parse_args(argv)
    if args.auth:
        # Read by moto when it is imported: the IAM setup below is the three unchecked actions.
        os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"

    import boto3
    from botocore.config import Config
    from moto.server import ThreadedMotoServer

    answer_preflights_unsigned()

    port = args.port or free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = "http://127.0.0.1:%d" % port

    key_id, secret = "testing", "testing"
    if args.auth:
        key_id, secret = signed_user(boto3, url)
    s3 = boto3.client(
        "s3", endpoint_url=url, region_name="us-east-1",
        aws_access_key_id=key_id, aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 3}),
    )
    s3.create_bucket(Bucket=args.bucket)
    # Pages read the bucket too (js/test/browser.test.js, signed S3 from the wasm build): the
    # preflight of a signed GET, and the headers object_store reads from a cross-origin answer.
    # (`*` in Access-Control-Allow-Headers does not cover Authorization: it is named too.)
    s3.put_bucket_cors(Bucket=args.bucket, CORSConfiguration={"CORSRules": [{
        "AllowedOrigins": ["*"], "AllowedMethods": ["GET", "HEAD"], "AllowedHeaders": ["*", "Authorization"],
        "ExposeHeaders": ["ETag", "Content-Range", "Content-Length", "Last-Modified", "x-amz-request-id"],
        "MaxAgeSeconds": 600,
    }]})
    root = os.path.abspath(args.root)
    n = 0
    for dirpath, _dirs, files in os.walk(os.path.join(root, args.only)):
        for fn in files:
            full = os.path.join(dirpath, fn)
            key = os.path.relpath(full, root).replace(os.sep, "/")
            with open(full, "rb") as f:
                s3.put_object(Bucket=args.bucket, Key=key, Body=f.read())
            n += 1

    ready = "%s %s %s" % (url, key_id, secret) if args.auth else url
    if args.port_file == "-":
        print(ready, flush=True)
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    elif args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(ready)
        os.replace(tmp, args.port_file)
    print("moto S3 on %s bucket=%s objects=%d" % (url, args.bucket, n), file=sys.stderr)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    while not stop.wait(0.5):
        pass
    server.stop()


if __name__ == "__main__":
    main()
