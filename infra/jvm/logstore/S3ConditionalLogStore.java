package io.outoforder.delta;

import io.delta.storage.S3SingleDriverLogStore;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Delta's transaction log on S3 for writers in several processes.
 *
 * <p>Delta commits version N by creating the file {@code N.json} only if it does not exist yet.
 * {@link S3SingleDriverLogStore} checks for the file and then writes it, under a lock that only
 * its own JVM sees: two drivers can both find N free, and the second PUT silently replaces the
 * first commit. Here a new log file is created with a conditional PUT ({@code If-None-Match: *},
 * hadoop-aws's {@code fs.option.create.conditional.overwrite}), so the store itself lets exactly
 * one of them through; the other gets {@link java.nio.file.FileAlreadyExistsException}, which
 * Delta's optimistic transaction answers by checking the winner's commit for conflicts and
 * retrying at the next version. Reads, listings and overwrites (checkpoint pointers) are
 * S3SingleDriverLogStore's.
 *
 * <p>Needs an S3 service with conditional writes (AWS S3, MinIO) and hadoop-aws 3.4.2 or later
 * with {@code fs.s3a.create.conditional.enabled} (its default); without them the first commit
 * fails, it never falls back to the unsafe write.
 */
public class S3ConditionalLogStore extends S3SingleDriverLogStore {
  private static final String CONDITIONAL = "fs.option.create.conditional.overwrite";
  // what hadoop-aws raises for HTTP 412 Precondition Failed (named, not imported: no compile-time
  // dependency on hadoop-aws, which is only on the class path of an s3a lake)
  private static final String PRECONDITION_FAILED = "org.apache.hadoop.fs.s3a.RemoteFileChangedException";

  public S3ConditionalLogStore(Configuration initHadoopConf) {
    super(initHadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    if (overwrite) {
      super.write(path, actions, true, hadoopConf);
      return;
    }
    FileSystem fs = path.getFileSystem(hadoopConf);
    Path target = fs.makeQualified(path);
    FSDataOutputStream out;
    try {
      // raw types in Hadoop's builder API: build() is declared to return Object
      out = (FSDataOutputStream) fs.createFile(target).overwrite(false).must(CONDITIONAL, true).build();
    } catch (org.apache.hadoop.fs.FileAlreadyExistsException e) {
      throw taken(target, e);
    }
    try (FSDataOutputStream stream = out) {
      while (actions.hasNext()) {
        stream.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
      }
    } catch (IOException e) {
      // the conditional PUT happens when the stream closes: another writer's commit came first
      if (preconditionFailed(e)) {
        throw taken(target, e);
      }
      throw e;
    }
  }

  private static boolean preconditionFailed(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (t.getClass().getName().equals(PRECONDITION_FAILED)
          || t instanceof org.apache.hadoop.fs.FileAlreadyExistsException) {
        return true;
      }
    }
    return false;
  }

  private static java.nio.file.FileAlreadyExistsException taken(Path path, Throwable cause) {
    java.nio.file.FileAlreadyExistsException e =
        new java.nio.file.FileAlreadyExistsException(path.toString());
    e.initCause(cause);
    return e;
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
    return false; // a PUT is visible whole or not at all
  }
}
