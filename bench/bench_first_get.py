"""A fresh node process: open frt's reader for s3:// and GET four 2 KB objects, obstore vs boto3 (FRT_STORE_CLIENT),
against a local moto server, alternating, 3 each; the child's CPU from getrusage.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_first_get.py
"""
import os
import resource
import subprocess
import sys

sys.path.insert(0, "tests")
from helpers.s3server import S3Server

srv = S3Server().start()
try:
    c = srv.client()
    c.create_bucket(Bucket="bkt")
    for i in range(4):
        c.put_object(Bucket="bkt", Key=f"p/sha256/{f'{i:02d}' * 32}", Body=b"x" * 2000)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(srv.env(), PYTHONPATH=os.getcwd())
    code = """
import io, time, sys
t0 = time.perf_counter()
from frt_dist.distribution.objstore import open_store
st = open_store('s3://bkt/p', reading=True)
t1 = time.perf_counter()
st.get('sha256/' + '00' * 32, io.BytesIO())
t2 = time.perf_counter()
for i in range(1, 4): st.get('sha256/' + ('%02d' % i) * 32, io.BytesIO())
t3 = time.perf_counter()
print(type(st).__name__, 'open %.3f first-get %.3f 3 more %.3f' % (t1 - t0, t2 - t1, t3 - t2))
"""
    for client in ("auto", "boto3") * 3:
        b = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run([sys.executable, "-c", code], env={**env, "FRT_STORE_CLIENT": client}, capture_output=True, text=True)
        a = resource.getrusage(resource.RUSAGE_CHILDREN)
        print(r.stdout.strip() or r.stderr[-500:], "cpu %.3f" % (a.ru_utime - b.ru_utime + a.ru_stime - b.ru_stime))
finally:
    srv.stop()
